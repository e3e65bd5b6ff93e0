#include "client/ctl/watch.hpp"

#include <thread>

namespace iris::ctl {

void watch(const WatchOptions& options, const std::function<bool(uint32_t)>& sample) {
  const auto interval = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(options.interval_s));
  auto next = std::chrono::steady_clock::now();
  for (uint32_t i = 0; options.count == 0 || i < options.count; ++i) {
    if (!sample(i)) return;
    if (options.count != 0 && i + 1 == options.count) return;
    // Fixed ticks, not sleeps after the work: rates stay per interval however slow a call was.
    next += interval;
    std::this_thread::sleep_until(next);
  }
}

}  // namespace iris::ctl
