// The ranks that have arrived at one collective, by rank. Every arrival, copy completion and
// delivery looks a rank up, on the one progress thread: the records of the ranks that arrived sit
// in one vector in arrival order, so that a walk visits only those, and a rank is found through
// an index (a std::map by rank cost about 11% of the thread's instructions at 8 ranks). Up to
// kIndexedRanks ranks the index is an array by rank (4 bytes a rank: one load); a larger
// communicator's collective, which a tenant can leave waiting by the hundreds, indexes only the
// ranks that arrived, in a hash map, so that it holds memory for what arrived, not for nranks.
// clear() keeps the memory of a small collective for the next one, so that steady traffic allocates
// nothing.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/collectives/request_validation.hpp"
#include "daemon/sessions/completion_target.hpp"

namespace iris::daemon {

struct ArrivedRank {
  uint32_t rank = 0;
  CompletionTarget target;
  std::optional<ValidatedRequest> request;  // empty when the rank's request failed validation
  uint32_t copies_touching = 0;             // copies (and network sends) in flight on its buffers
  bool delivered = false;                   // completion written
  // A rank of another node (scale out): its request's send buffer holds the part of its data
  // this node needs, and its own daemon completes it.
  bool remote = false;
};

class ArrivedRanks {
 public:
  // Communicators of up to this many ranks get the array index, and the room for all their
  // records up front; the records' room a cleared collective keeps is bounded by it too.
  static constexpr uint32_t kIndexedRanks = 256;

  // Empty, for a collective of `nranks` ranks.
  void reset(uint32_t nranks) {
    clear();
    nranks_ = nranks;
    if (nranks <= kIndexedRanks) {
      slot_of_.assign(nranks, kAbsent);
      records_.reserve(nranks);
    }
  }

  // Drops every record, releasing what they hold (their buffers' mappings) at once.
  void clear() {
    records_.clear();
    if (records_.capacity() > kIndexedRanks) std::vector<ArrivedRank>().swap(records_);
    sparse_slot_of_.reset();
    slot_of_.clear();
    nranks_ = 0;
  }

  // A fresh record for `rank` (one already there is reset). References to records hold until
  // the next put().
  ArrivedRank& put(uint32_t rank) {
    if (rank >= nranks_)
      throw std::out_of_range("rank " + std::to_string(rank) + " past the collective's " +
                              std::to_string(nranks_) + " ranks");
    if (ArrivedRank* there = find(rank)) {
      *there = ArrivedRank{};
      there->rank = rank;
      return *there;
    }
    const auto slot = static_cast<uint32_t>(records_.size());
    if (nranks_ <= kIndexedRanks)
      slot_of_[rank] = slot;
    else
      sparse().emplace(rank, slot);
    ArrivedRank& added = records_.emplace_back();
    added.rank = rank;
    return added;
  }

  ArrivedRank* find(uint32_t rank) {
    if (rank < slot_of_.size())
      return slot_of_[rank] == kAbsent ? nullptr : &records_[slot_of_[rank]];
    if (!sparse_slot_of_) return nullptr;
    auto it = sparse_slot_of_->find(rank);
    return it == sparse_slot_of_->end() ? nullptr : &records_[it->second];
  }
  const ArrivedRank* find(uint32_t rank) const {
    return const_cast<ArrivedRanks*>(this)->find(rank);
  }
  bool contains(uint32_t rank) const { return find(rank) != nullptr; }
  // The record of a rank that arrived; std::out_of_range for one that did not.
  ArrivedRank& at(uint32_t rank) {
    if (ArrivedRank* r = find(rank)) return *r;
    throw std::out_of_range("rank " + std::to_string(rank) + " has not arrived");
  }
  const ArrivedRank& at(uint32_t rank) const { return const_cast<ArrivedRanks*>(this)->at(rank); }

  uint32_t size() const { return static_cast<uint32_t>(records_.size()); }
  // Records' room held, arrived or not: what a cleared collective keeps.
  std::size_t room() const { return records_.capacity(); }
  bool empty() const { return records_.empty(); }
  std::vector<ArrivedRank>::iterator begin() { return records_.begin(); }
  std::vector<ArrivedRank>::iterator end() { return records_.end(); }
  std::vector<ArrivedRank>::const_iterator begin() const { return records_.begin(); }
  std::vector<ArrivedRank>::const_iterator end() const { return records_.end(); }

 private:
  static constexpr uint32_t kAbsent = std::numeric_limits<uint32_t>::max();
  uint32_t nranks_ = 0;
  std::vector<uint32_t> slot_of_;  // by rank, up to kIndexedRanks: its record's index, or kAbsent
  // The same, past kIndexedRanks. Behind a pointer, made on first use: a small collective's
  // moves and clears, on every retirement, then never touch a hash map.
  std::unique_ptr<std::unordered_map<uint32_t, uint32_t>> sparse_slot_of_;
  std::unordered_map<uint32_t, uint32_t>& sparse() {
    if (!sparse_slot_of_)
      sparse_slot_of_ = std::make_unique<std::unordered_map<uint32_t, uint32_t>>();
    return *sparse_slot_of_;
  }
  std::vector<ArrivedRank> records_;
};

}  // namespace iris::daemon
