// Rate limit for log lines one tenant can cause (bad ring entries, failing collectives): a token
// bucket per session or communicator, so that a flood of bad requests costs a few lines a second
// and says how many it left out.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace iris::daemon {

class LogLimiter {
 public:
  static constexpr double kLinesPerSecond = 10;
  static constexpr double kBurst = 20;

  // True when a line may be written now; then `note` says how many were left out before it
  // (empty when none), to append to the line.
  bool allow(std::string& note) {
    const auto now = std::chrono::steady_clock::now();
    tokens_ = std::min(
        kBurst, tokens_ + kLinesPerSecond * std::chrono::duration<double>(now - last_).count());
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
  double tokens_ = kBurst;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  uint64_t suppressed_ = 0;
};

}  // namespace iris::daemon
