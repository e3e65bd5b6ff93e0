#include "daemon/front/control_service.hpp"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include "daemon/front/reports.hpp"
#include "daemon/front/wire.hpp"
#include "daemon/operations/stats_report.hpp"
#include "iris/shared/metadata.hpp"
#include "iris/shared/version.hpp"

namespace iris::daemon {

namespace {

grpc::StatusCode grpc_code(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kSizeMismatch:
    case ErrorCode::kNranksMismatch:
    case ErrorCode::kSequenceError:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case ErrorCode::kNotFound:
      return grpc::StatusCode::NOT_FOUND;
    case ErrorCode::kOutOfRange:
      return grpc::StatusCode::OUT_OF_RANGE;
    case ErrorCode::kPermissionDenied:
      return grpc::StatusCode::PERMISSION_DENIED;
    case ErrorCode::kAlreadyExists:
      return grpc::StatusCode::ALREADY_EXISTS;
    case ErrorCode::kLimitExceeded:
    case ErrorCode::kBusy:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case ErrorCode::kTimeout:
      return grpc::StatusCode::DEADLINE_EXCEEDED;
    case ErrorCode::kProtocolMismatch:
      return grpc::StatusCode::FAILED_PRECONDITION;
    case ErrorCode::kUnavailable:
    case ErrorCode::kDaemonGone:
      return grpc::StatusCode::UNAVAILABLE;
    case ErrorCode::kPeerLost:
      return grpc::StatusCode::ABORTED;
    default:
      return grpc::StatusCode::INTERNAL;
  }
}

std::string metadata(grpc::ServerContext* ctx, const char* key) {
  const auto& md = ctx->client_metadata();
  auto it = md.find(key);
  return it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

}  // namespace

ControlService::ControlService(const Config& config, Runtime& runtime, ProgressLoop& loop,
                               Stats& stats, const CallerTokens& tokens, const Health& health,
                               std::string metrics_address)
    : config_(config),
      runtime_(runtime),
      loop_(loop),
      stats_(stats),
      tokens_(tokens),
      health_(health),
      metrics_address_(std::move(metrics_address)) {}

template <typename Body>
grpc::Status ControlService::handle(grpc::ServerContext* ctx, Body&& body) {
  try {
    require_protocol(metadata(ctx, kProtocolMetadataKey));
    body();
    return grpc::Status::OK;
  } catch (const Error& e) {
    return grpc::Status(grpc_code(e.code()), e.message(),
                        std::to_string(static_cast<uint32_t>(e.code())));
  } catch (const std::exception& e) {
    spdlog::error("control call failed: {}", e.what());
    return grpc::Status(grpc::StatusCode::INTERNAL, e.what(),
                        std::to_string(static_cast<uint32_t>(ErrorCode::kInternal)));
  }
}

Caller ControlService::caller_of(grpc::ServerContext* ctx) const {
  const std::string token = metadata(ctx, kTokenMetadataKey);
  auto caller = token.empty() ? std::nullopt : tokens_.find(token);
  if (!caller)
    throw Error(ErrorCode::kPermissionDenied,
                "listing sessions and communicators needs the token of an open attach "
                "connection (iris-ctl gets one itself)");
  return *caller;
}

grpc::Status ControlService::GetStatus(grpc::ServerContext* ctx, const v1::GetStatusRequest*,
                                       v1::GetStatusResponse* resp) {
  return handle(ctx, [&] {
    const Health::Verdict verdict = health_.verdict(Health::Clock::now());
    resp->set_healthy(verdict.healthy);
    resp->set_health_reason(verdict.reason);
    resp->set_metrics_address(metrics_address_);
    resp->set_meeting_address(config_.meeting_address);
    resp->set_version(std::string(release_version()));
    resp->set_build(std::string(build_info()));
    resp->set_protocol_version(kProtocolVersion);
    resp->set_uptime_seconds(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
    const EngineDescription& engine = runtime_.engine_description();
    resp->set_engine(engine.name);
    resp->set_engine_reason(engine.reason);
    resp->set_driver_version(engine.driver_version);
    resp->set_copy_method(engine.copy_method);
    resp->set_runtime_library(engine.runtime_library);
    for (const DeviceDescription& d : engine.devices) {
      auto* dev = resp->add_devices();
      dev->set_name(d.name);
      dev->set_bus_id(d.bus_id);
      dev->set_memory_bytes(d.memory_bytes);
      for (const CopyEngineDescription& e : d.engines) {
        auto* ce = dev->add_engines();
        ce->set_name(e.name);
        ce->set_index(e.index);
      }
      for (const std::string& peer : d.peer_bus_ids) dev->add_peer_bus_ids(peer);
      for (const PeerLink& l : d.links) {
        auto* link = dev->add_links();
        link->set_bus_id(l.bus_id);
        link->set_type(l.type);
        for (uint32_t e : l.engines) link->add_engines(e);
      }
    }
    // From the gauges, not the loop: status must answer (unhealthy) when the loop is wedged.
    resp->set_sessions(static_cast<uint32_t>(stats_.sessions.load(std::memory_order_relaxed)));
    resp->set_communicators(
        static_cast<uint32_t>(stats_.communicators.load(std::memory_order_relaxed)));
    resp->set_socket_path(config_.socket_path);
    resp->set_pid(static_cast<uint32_t>(::getpid()));
    resp->set_sessions_resumed(stats_.sessions_resumed_total.load(std::memory_order_relaxed));
    resp->set_resume_window_ms(config_.limits.resume_window_ms);
  });
}

grpc::Status ControlService::GetStats(grpc::ServerContext* ctx, const v1::GetStatsRequest*,
                                      v1::GetStatsResponse* resp) {
  return handle(ctx, [&] {
    // Without a token (a monitoring script calling GetStats) no user's engine rows.
    const std::string token = metadata(ctx, kTokenMetadataKey);
    const std::optional<Caller> caller = token.empty() ? std::nullopt : tokens_.find(token);
    UsersShown shown{false, std::nullopt};
    if (caller) shown = {caller->sees_all, static_cast<uint32_t>(caller->uid)};
    fill_stats(stats_, gpu_count(runtime_.engine_description()), *resp, shown);
  });
}

grpc::Status ControlService::ListSessions(grpc::ServerContext* ctx, const v1::ListSessionsRequest*,
                                          v1::ListSessionsResponse* resp) {
  return handle(ctx, [&] {
    const Caller caller = caller_of(ctx);
    loop_.call([&] {
      fill_sessions(runtime_.sessions(), runtime_.comms(), config_.limits, caller, *resp);
    });
  });
}

grpc::Status ControlService::ListComms(grpc::ServerContext* ctx, const v1::ListCommsRequest*,
                                       v1::ListCommsResponse* resp) {
  return handle(ctx, [&] {
    const Caller caller = caller_of(ctx);
    loop_.call([&] {
      fill_comms(runtime_.comms(), runtime_.sessions(), runtime_.point_to_point(), caller, *resp);
    });
  });
}

}  // namespace iris::daemon
