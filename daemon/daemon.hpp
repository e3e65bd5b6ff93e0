// irisd's top level: single-instance lock, stale-state cleanup, engine, progress loop, attach
// listener and gRPC server, in that order up and in reverse down.
#pragma once

#include <memory>

#include "daemon/config.hpp"

namespace grpc {
class ServerBuilder;
}

namespace iris::daemon {

class Daemon {
 public:
  explicit Daemon(Config config);
  ~Daemon();
  // Starts everything; throws std::runtime_error with an operator-facing reason on failure.
  void start();
  void shutdown();

 private:
  void start_metrics();
  // Bounds what the operators' gRPC socket lets a connection hold (time, streams, threads).
  void limit_operator_connections(grpc::ServerBuilder& builder);
  // A thread that keeps the gRPC health service's answer (what probes see) up to date, even
  // when the progress loop is the thing that stopped.
  void start_health_watch();
  struct Parts;
  Config config_;
  std::unique_ptr<Parts> parts_;
};

}  // namespace iris::daemon
