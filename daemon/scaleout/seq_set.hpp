// The collectives of one rank of another node that this node has heard of, so that what that node
// sends again after its irisd restarted is recognised and dropped: a watermark below which every
// sequence number came, and the ones above it (a rank's arrivals come nearly in order, so the set
// above stays as small as its collectives in flight).
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>

namespace iris::daemon {

class SeqSet {
 public:
  // Sequence numbers start at 1.
  explicit SeqSet(uint64_t below = 1) : below_(below) {}

  bool contains(uint64_t seq) const { return seq < below_ || above_.count(seq) != 0; }
  // Adds `seq`; false when it was there already.
  bool insert(uint64_t seq) {
    if (contains(seq)) return false;
    if (seq != below_) {
      above_.insert(seq);
      return true;
    }
    ++below_;
    while (!above_.empty() && *above_.begin() == below_) {
      above_.erase(above_.begin());
      ++below_;
    }
    return true;
  }
  // Takes `seq` out again (an arrival whose data never came).
  void erase(uint64_t seq) {
    if (seq >= below_) {
      above_.erase(seq);
      return;
    }
    for (uint64_t s = seq + 1; s < below_; ++s) above_.insert(s);
    below_ = seq;
  }
  // Every sequence number below this one is in the set.
  uint64_t below() const { return below_; }
  // Sequence numbers held above the watermark (what a gap costs).
  std::size_t above() const { return above_.size(); }

 private:
  uint64_t below_;
  std::set<uint64_t> above_;
};

}  // namespace iris::daemon
