// What iris-ctl shows, as control.proto answers: counters, sessions, communicators and the
// collectives they have in flight.
#pragma once

#include "daemon/collectives/communicator_registry.hpp"
#include "daemon/sessions/session_registry.hpp"
#include "daemon/stats.hpp"
#include "iris/v1/control.pb.h"

namespace iris::daemon {

// Any thread: the counters are atomics. Each counter goes to the field of its name.
void fill_stats(const Stats& stats, v1::GetStatsResponse& out);
// Progress thread only.
void fill_sessions(const SessionRegistry& sessions, v1::ListSessionsResponse& out);
void fill_comms(const CommunicatorRegistry& comms, v1::ListCommsResponse& out);

}  // namespace iris::daemon
