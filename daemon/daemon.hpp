// irisd's top level: single-instance lock, stale-state cleanup, engine, progress loop, attach
// listener and gRPC server, in that order up and in reverse down.
#pragma once

#include <memory>

#include "daemon/config.hpp"

namespace iris::daemon {

class Daemon {
 public:
  explicit Daemon(Config config);
  ~Daemon();
  // Starts everything; throws std::runtime_error with an operator-facing reason on failure.
  void start();
  // Blocks until SIGTERM or SIGINT (which the caller has blocked in every thread).
  void wait_for_signal();
  void shutdown();

 private:
  struct Parts;
  Config config_;
  std::unique_ptr<Parts> parts_;
};

}  // namespace iris::daemon
