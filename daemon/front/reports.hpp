// What iris-ctl's lists show, as control.proto answers: sessions, communicators and the
// collectives they have in flight (the counters are operations/stats_report.hpp).
#pragma once

#include "daemon/collectives/communicator_registry.hpp"
#include "daemon/collectives/point_to_point.hpp"
#include "daemon/config.hpp"
#include "daemon/front/caller_tokens.hpp"
#include "daemon/sessions/session_registry.hpp"
#include "iris/v1/control.pb.h"

namespace iris::daemon {

// Progress thread only. What `caller` may see: its uid's own, or everything for an operator.
// Sessions come with their users' usage against `limits`.
void fill_sessions(const SessionRegistry& sessions, const CommunicatorRegistry& comms,
                   const Limits& limits, const Caller& caller, v1::ListSessionsResponse& out);
void fill_comms(const CommunicatorRegistry& comms, const SessionRegistry& sessions,
                const PointToPoint& p2p, const Caller& caller, v1::ListCommsResponse& out);

}  // namespace iris::daemon
