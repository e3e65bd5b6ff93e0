// The counters as one answer (control.proto's GetStatsResponse), read by the gRPC GetStats
// call, the Prometheus collector and the health check alike, so iris-ctl, gRPC and /metrics
// never disagree.
#pragma once

#include <string>

#include "daemon/engines/engine.hpp"
#include "daemon/stats.hpp"
#include "iris/shared/collective_shape.hpp"
#include "iris/v1/control.pb.h"

namespace iris::daemon {

// Any thread: the counters are atomics. Each counter goes to the field of its name, the families
// to their repeated fields (nonzero entries; devices: the host and the engine's `devices`).
void fill_stats(const Stats& stats, std::size_t devices, v1::GetStatsResponse& out);
// The GPUs an engine copies for: none for the host engine (its one device is host memory).
std::size_t gpu_count(const EngineDescription& engine);
// The label of a DeviceCounters slot: "host", or the engine's device index.
std::string device_label(std::size_t slot);

}  // namespace iris::daemon
