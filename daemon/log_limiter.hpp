// Rate limit for log lines one tenant can cause (bad ring entries, failing collectives): a token
// bucket per session or communicator, so that a flood of bad requests costs a few lines a second
// and says how many it left out.
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

  // True when a line may be written now; then `note` says how many were left out before it
  // (empty when none), to append to the line.
  bool allow(std::string& note) {
    const auto now = std::chrono::steady_clock::now();
    tokens_ =
        std::min(burst_, tokens_ + rate_ * std::chrono::duration<double>(now - last_).count());
    last_ = now;
    if (tokens_ < 1) {
      ++suppressed_;
      return false;
    }
    tokens_ -= 1;
    note = suppressed_ == 0 ? std::string()
                            : " (" + std::to_string(suppressed_) + " similar lines suppressed)";
    suppressed_ = 0;
    return true;
  }

 private:
  double rate_;
  double burst_;
  double tokens_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  uint64_t suppressed_ = 0;
};

}  // namespace iris::daemon
