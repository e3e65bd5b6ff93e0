// Whether irisd is fit to serve, for the gRPC health service, `iris-ctl status` (and so the
// DaemonSet's probes) and /metrics. Two things make it unhealthy: the progress loop has not
// turned for `stall_after` (a wedged data path), or a device's last `failed_copies` copies all
// failed with none succeeding (its engine or GPU is gone). A copy that succeeds on the device, or
// the loop turning again, makes it healthy again.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "daemon/stats.hpp"

namespace iris::daemon {

class Health {
 public:
  using Clock = std::chrono::steady_clock;

  // Reads the devices' failing streaks from `stats`.
  explicit Health(const Stats& stats,
                  std::chrono::milliseconds stall_after = std::chrono::seconds(10),
                  uint32_t failed_copies = 16);

  // Progress thread: the loop turned.
  void loop_turned(Clock::time_point now);

  struct Verdict {
    bool healthy = true;
    std::string reason;  // empty when healthy; else what an operator should look at
  };
  // Any thread.
  Verdict verdict(Clock::time_point now) const;

 private:
  const Stats& stats_;
  std::chrono::milliseconds stall_after_;
  uint32_t failed_copies_;
  std::atomic<int64_t> last_turn_ns_;
};

}  // namespace iris::daemon
