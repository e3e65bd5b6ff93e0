// Completions of copies an engine cut into pieces (one per copy engine): the whole copy is
// reported once, after its last piece retired, and failed if any piece failed.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "daemon/engines/engine.hpp"

namespace iris::daemon {

class SplitCompletions {
 public:
  // A copy cut into `pieces`; returns the id its pieces carry (never 0).
  uint64_t begin(const CopyCompletion& whole, uint32_t pieces) {
    const uint64_t id = next_++;
    splits_.emplace(id, Split{whole, pieces});
    return id;
  }

  // A piece retired: appends the copy's completion to `out` when `split` is 0 (the copy was not
  // cut: `piece` is the whole copy) or when this was its last piece.
  void retire(uint64_t split, const CopyCompletion& piece, std::vector<CopyCompletion>& out) {
    if (split == 0) {
      out.push_back(piece);
      return;
    }
    auto it = splits_.find(split);
    if (it == splits_.end()) return;
    Split& s = it->second;
    if (piece.code != ErrorCode::kOk) s.completion.code = piece.code;
    s.completion.engine_ns += piece.engine_ns;  // the pieces' engines' time, summed
    if (--s.pieces_left != 0) return;
    out.push_back(s.completion);
    splits_.erase(it);
  }

 private:
  struct Split {
    CopyCompletion completion;
    uint32_t pieces_left;
  };
  uint64_t next_ = 1;
  std::unordered_map<uint64_t, Split> splits_;
};

}  // namespace iris::daemon
