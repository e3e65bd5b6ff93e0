// What iris-ctl shows, as control.proto answers: counters, sessions, communicators and the
// collectives they have in flight.
#pragma once

#include "daemon/collectives/communicator_registry.hpp"
#include "daemon/front/caller_tokens.hpp"
#include "daemon/sessions/session_registry.hpp"
#include "daemon/stats.hpp"
#include "iris/v1/control.pb.h"

namespace iris::daemon {

// Any thread: the counters are atomics. Each counter goes to the field of its name, the families
// to their repeated fields (nonzero entries; devices: the host and the engine's `devices`).
void fill_stats(const Stats& stats, std::size_t devices, v1::GetStatsResponse& out);
// The GPUs an engine copies for: none for the host engine (its one device is host memory).
std::size_t gpu_count(const EngineDescription& engine);
// The label of a DeviceCounters slot: "host", or the engine's device index.
std::string device_label(std::size_t slot);
// Progress thread only. What `caller` may see: its uid's own, or everything for an operator.
void fill_sessions(const SessionRegistry& sessions, const CommunicatorRegistry& comms,
                   const Caller& caller, v1::ListSessionsResponse& out);
void fill_comms(const CommunicatorRegistry& comms, const SessionRegistry& sessions,
                const Caller& caller, v1::ListCommsResponse& out);

}  // namespace iris::daemon
