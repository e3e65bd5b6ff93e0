// The gRPC Control service. Handlers run on gRPC's threads and reach daemon state only through
// the progress loop. A session's calls carry its token (from the attach handshake) as metadata.
#pragma once

#include <chrono>

#include "daemon/progress_loop.hpp"
#include "daemon/runtime.hpp"
#include "iris/v1/control.grpc.pb.h"
#include "iris/v1/control.pb.h"

namespace iris::daemon {

class ControlService final : public v1::Control::Service {
 public:
  ControlService(const Config& config, Runtime& runtime, ProgressLoop& loop, Stats& stats);

  grpc::Status Detach(grpc::ServerContext*, const v1::DetachRequest*, v1::DetachResponse*) override;
  grpc::Status RegisterBuffer(grpc::ServerContext*, const v1::RegisterBufferRequest*,
                              v1::RegisterBufferResponse*) override;
  grpc::Status DeregisterBuffer(grpc::ServerContext*, const v1::DeregisterBufferRequest*,
                                v1::DeregisterBufferResponse*) override;
  grpc::Status CommInit(grpc::ServerContext*, const v1::CommInitRequest*,
                        v1::CommInitResponse*) override;
  grpc::Status CommDestroy(grpc::ServerContext*, const v1::CommDestroyRequest*,
                           v1::CommDestroyResponse*) override;
  grpc::Status GetStatus(grpc::ServerContext*, const v1::GetStatusRequest*,
                         v1::GetStatusResponse*) override;
  grpc::Status GetStats(grpc::ServerContext*, const v1::GetStatsRequest*,
                        v1::GetStatsResponse*) override;
  grpc::Status ListSessions(grpc::ServerContext*, const v1::ListSessionsRequest*,
                            v1::ListSessionsResponse*) override;
  grpc::Status ListComms(grpc::ServerContext*, const v1::ListCommsRequest*,
                         v1::ListCommsResponse*) override;

 private:
  // Runs `body` after the protocol check, turning iris::Error into a gRPC status.
  template <typename Body>
  grpc::Status handle(grpc::ServerContext* ctx, Body&& body);
  uint64_t session_of(grpc::ServerContext* ctx);

  const Config& config_;
  Runtime& runtime_;
  ProgressLoop& loop_;
  Stats& stats_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace iris::daemon
