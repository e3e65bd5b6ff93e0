// The counters as one answer (control.proto's GetStatsResponse), read by the gRPC GetStats
// call, the Prometheus collector and the health check alike, so iris-ctl, gRPC and /metrics
// never disagree.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "daemon/engines/engine.hpp"
#include "daemon/stats.hpp"
#include "iris/shared/collective_shape.hpp"
#include "iris/v1/control.pb.h"

namespace iris::daemon {

// Any thread: the counters are atomics. Each counter goes to the field of its name, the families
// to their repeated fields (nonzero entries; devices: the host and the engine's `devices`).
// engine_users: the rows of the users in `users_shown`.
struct UsersShown {
  bool all = true;              // root, the operator group, /metrics
  std::optional<uint32_t> uid;  // otherwise this one user's (none: a caller irisd does not know)
};
void fill_stats(const Stats& stats, std::size_t devices, v1::GetStatsResponse& out,
                const UsersShown& users_shown = {});
// The GPUs an engine copies for: none for the host engine (its one device is host memory).
std::size_t gpu_count(const EngineDescription& engine);
// The label of a DeviceCounters slot: "host", or the engine's device index.
std::string device_label(std::size_t slot);

}  // namespace iris::daemon
