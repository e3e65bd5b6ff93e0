#include "daemon/operations/health.hpp"

#include "daemon/operations/stats_report.hpp"

namespace iris::daemon {

namespace {
int64_t nanos(Health::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
}  // namespace

Health::Health(const Stats& stats, std::chrono::milliseconds stall_after, uint32_t failed_copies)
    : stats_(stats),
      stall_after_(stall_after),
      failed_copies_(failed_copies),
      last_turn_ns_(nanos(Clock::now())) {}

void Health::loop_turned(Clock::time_point now) {
  last_turn_ns_.store(nanos(now), std::memory_order_relaxed);
}

Health::Verdict Health::verdict(Clock::time_point now) const {
  const auto idle =
      std::chrono::nanoseconds(nanos(now) - last_turn_ns_.load(std::memory_order_relaxed));
  if (idle > stall_after_)
    return {false,
            "the progress loop has not turned for " +
                std::to_string(std::chrono::duration_cast<std::chrono::seconds>(idle).count()) +
                " s: the data path is wedged (systemd's watchdog restarts irisd; else "
                "restart it and report the log)"};
  for (std::size_t slot = 0; slot < kDeviceSlots; ++slot) {
    const uint64_t streak = stats_.devices[slot].failing_streak.load(std::memory_order_relaxed);
    if (streak >= failed_copies_)
      return {false, "the last " + std::to_string(streak) + " copies for device " +
                         device_label(slot) +
                         " all failed: its copy engine or GPU is not working (the log has the "
                         "engine's errors)"};
  }
  return {};
}

}  // namespace iris::daemon
