// A submitted collective. Completion is visible through shared memory: test() costs a load,
// wait() spins briefly and then sleeps on a futex the daemon wakes.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "iris/error.hpp"

namespace iris {

class Request {
 public:
  struct Impl;
  Request();
  explicit Request(std::shared_ptr<Impl> impl);
  Request(Request&&) noexcept;
  Request& operator=(Request&&) noexcept;
  ~Request();

  // True once complete; throws iris::Error if it completed with an error.
  bool test();
  // Waits up to `timeout`; false when it ran out. Throws iris::Error on a failed collective, or
  // kDaemonGone when irisd stopped or died while waiting.
  bool wait(std::chrono::nanoseconds timeout);
  // Waits without a limit (but still returns kDaemonGone if irisd goes away).
  void wait();
  bool valid() const { return impl_ != nullptr; }

 private:
  std::shared_ptr<Impl> impl_;
};

// Waits for every request; then, if any failed, throws the first failure (by position). All of
// them have completed by the time it throws, so every buffer is the caller's again.
void wait_all(std::vector<Request>& requests);

}  // namespace iris
