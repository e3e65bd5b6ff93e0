// How often each user may attach: a token bucket per uid (rate per second, as large a burst).
// Every attach makes the progress thread create or adopt a session segment, so one user
// attaching in a loop would slow every other tenant's collectives; past its rate an attach is
// refused as busy (libiris tries again, backing off). Used by the attach thread only.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <unordered_map>

namespace iris::daemon {

class AttachRate {
 public:
  using Clock = std::chrono::steady_clock;
  explicit AttachRate(uint32_t per_second) : per_second_(per_second) {}

  // Takes one attach of `uid` at `now`; false when the uid is past its rate.
  bool take(uid_t uid, Clock::time_point now);
  std::size_t tracked() const { return buckets_.size(); }

 private:
  struct Bucket {
    double tokens;
    Clock::time_point at;
  };
  // Users whose bucket has filled again are forgotten once this many are tracked.
  static constexpr std::size_t kMaxTracked = 4096;
  double per_second_;
  std::unordered_map<uid_t, Bucket> buckets_;
};

}  // namespace iris::daemon
