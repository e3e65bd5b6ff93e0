// The gRPC Control service: the operator's read-only view (status, stats, sessions,
// communicators). Handlers run on gRPC's threads and reach daemon state only through the progress
// loop. The lists need a token from an attach (metadata), and show the token's uid its own
// sessions and communicators, or everything to root and the operator group.
#pragma once

#include <chrono>

#include "daemon/front/caller_tokens.hpp"
#include "daemon/operations/health.hpp"
#include "daemon/progress_loop.hpp"
#include "daemon/runtime.hpp"
#include "iris/v1/control.grpc.pb.h"
#include "iris/v1/control.pb.h"

namespace iris::daemon {

class ControlService final : public v1::Control::Service {
 public:
  // `metrics_address`: where /metrics is served (HOST:PORT), empty when off.
  ControlService(const Config& config, Runtime& runtime, ProgressLoop& loop, Stats& stats,
                 const CallerTokens& tokens, const Health& health, std::string metrics_address);

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
  // Who calls: from the token's attach; throws kPermissionDenied without a valid one.
  Caller caller_of(grpc::ServerContext* ctx) const;

  const Config& config_;
  Runtime& runtime_;
  ProgressLoop& loop_;
  Stats& stats_;
  const CallerTokens& tokens_;
  const Health& health_;
  std::string metrics_address_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace iris::daemon
