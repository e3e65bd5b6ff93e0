// The refresh loop of the commands that watch irisd: a sample now, then one every interval, until
// `count` samples (0: until interrupted).
#pragma once

#include <chrono>
#include <functional>

namespace iris::ctl {

struct WatchOptions {
  double interval_s = 2.0;
  uint32_t count = 0;
};

// Calls `sample(index)` for index 0, 1, ... at the interval; stops when it returns false.
void watch(const WatchOptions& options, const std::function<bool(uint32_t index)>& sample);

}  // namespace iris::ctl
