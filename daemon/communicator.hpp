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

#include "daemon/descriptor_validation.hpp"
#include "iris/error_code.hpp"

namespace iris::daemon {

// Where a rank's completion goes: a slot in its session's segment.
struct CompletionTarget {
  uint64_t session_id;
  uint32_t slot;
  uint32_t generation;
};

struct Arrival {
  CompletionTarget target;
  std::optional<ValidatedAllGather> plan;  // empty when the rank's request failed validation
};

// One all-gather matched by (communicator, seq) across ranks.
struct Collective {
  uint64_t seq = 0;
  uint64_t bytes = 0;
  bool bytes_known = false;
  ErrorCode error = ErrorCode::kOk;
  std::vector<std::optional<Arrival>> arrivals;  // by rank
  std::vector<uint32_t> landed;                  // by rank: blocks in place in its receive buffer
  std::vector<uint32_t> copies_touching;  // by rank: copies in flight from or into its buffers
  std::vector<bool> delivered;            // by rank: completion written
  uint32_t arrived = 0;
  uint32_t delivered_count = 0;
  uint64_t total_in_flight = 0;

  explicit Collective(uint64_t s, uint32_t nranks)
      : seq(s),
        arrivals(nranks),
        landed(nranks, 0),
        copies_touching(nranks, 0),
        delivered(nranks, false) {}
};

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
  uint64_t completed = 0;

  uint32_t joined() const {
    uint32_t n = 0;
    for (const auto& m : members) n += m.has_value() ? 1 : 0;
    return n;
  }
};

}  // namespace iris::daemon
