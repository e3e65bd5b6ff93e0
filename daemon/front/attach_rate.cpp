#include "daemon/front/attach_rate.hpp"

#include <algorithm>
#include <iterator>

namespace iris::daemon {

bool AttachRate::take(uid_t uid, Clock::time_point now) {
  auto refill = [&](Bucket& b) {
    const double elapsed = std::chrono::duration<double>(now - b.at).count();
    b.tokens = std::min(per_second_, b.tokens + std::max(0.0, elapsed) * per_second_);
    b.at = now;
  };
  if (buckets_.size() >= kMaxTracked && buckets_.count(uid) == 0) {
    for (auto it = buckets_.begin(); it != buckets_.end();) {
      refill(it->second);
      it = it->second.tokens >= per_second_ ? buckets_.erase(it) : std::next(it);
    }
  }
  auto [it, added] = buckets_.try_emplace(uid, Bucket{per_second_, now});
  Bucket& bucket = it->second;
  if (!added) refill(bucket);
  if (bucket.tokens < 1.0) return false;
  bucket.tokens -= 1.0;
  return true;
}

}  // namespace iris::daemon
