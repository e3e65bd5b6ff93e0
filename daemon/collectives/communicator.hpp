// A communicator as the daemon sees it: its ranks (sessions), the next sequence number each rank
// must submit, and the collectives in flight keyed by sequence number.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/collectives/collective.hpp"
#include "daemon/collectives/node_layout.hpp"
#include "daemon/log_limiter.hpp"
#include "iris/error_code.hpp"

namespace iris::daemon {

struct Communicator {
  uint64_t id = 0;
  std::string key;
  uint32_t nranks = 0;
  uid_t uid = 0;
  std::vector<std::optional<uint64_t>> members;  // session id by rank
  std::vector<uint64_t> next_seq;                // by rank; the first collective is seq 1
  std::map<uint64_t, std::unique_ptr<Collective>> in_flight;
  bool broken = false;  // a rank died or left: every collective fails with broken_code
  ErrorCode broken_code = ErrorCode::kOk;
  std::string broken_why;
  uint64_t completed = 0;
  // The nodes of a communicator that spans several daemons; null when all its ranks are here.
  std::shared_ptr<const NodeLayout> layout;
  // --log-level debug traces every collective's arrivals, start and end: many more lines a
  // second, still bounded.
  LogLimiter trace_limit{1000, 2000};

  bool is_local(uint32_t rank) const { return !layout || layout->local(rank); }

  uint32_t joined() const {
    uint32_t n = 0;
    for (const auto& m : members) n += m.has_value() ? 1 : 0;
    return n;
  }
};

}  // namespace iris::daemon
