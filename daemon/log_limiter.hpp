// A token bucket for log lines: a flood of one kind of line costs a few lines a second and says
// how many it left out. TenantLog (operations/tenant_log.hpp) keeps these per user and kind.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>

namespace iris::daemon {

class LogLimiter {
 public:
  // Warnings: 10 lines a second, bursts of 20.
  explicit LogLimiter(double lines_per_second = 10, double burst = 20)
      : rate_(lines_per_second), burst_(burst), tokens_(burst) {}

  // True when `cost` (lines or bytes) is there to spend now.
  bool can(double cost = 1) {
    refill();
    return tokens_ >= cost;
  }
  void spend(double cost = 1) { tokens_ -= cost; }
  // Spends `cost` if it is there; otherwise counts a suppressed line.
  bool take(double cost = 1) {
    if (!can(cost)) {
      ++suppressed_;
      return false;
    }
    spend(cost);
    return true;
  }

  // True when a line may be written now; then `note` says how many were left out before it
  // (empty when none), to append to the line.
  bool allow(std::string& note) {
    if (!take()) return false;
    note = take_suppressed_note();
    return true;
  }

  // " (N similar lines suppressed)" for the lines refused since the last call, or empty.
  std::string take_suppressed_note() {
    std::string note = suppressed_ == 0
                           ? std::string()
                           : " (" + std::to_string(suppressed_) + " similar lines suppressed)";
    suppressed_ = 0;
    return note;
  }
  void count_suppressed() { ++suppressed_; }
  // True when the bucket has been refilling long enough to be full: nothing to remember.
  bool idle() {
    refill();
    return tokens_ >= burst_ && suppressed_ == 0;
  }

 private:
  void refill() {
    const auto now = std::chrono::steady_clock::now();
    tokens_ =
        std::min(burst_, tokens_ + rate_ * std::chrono::duration<double>(now - last_).count());
    last_ = now;
  }

  double rate_;
  double burst_;
  double tokens_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  uint64_t suppressed_ = 0;
};

}  // namespace iris::daemon
