// One collective matched by (communicator, seq) across ranks: who has arrived with what, which
// copies are in flight, who has been told.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "daemon/collectives/request_validation.hpp"
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
  std::optional<ValidatedRequest> request;  // empty when the rank's request failed validation
};

struct Collective {
  uint64_t seq = 0;
  ErrorCode error = ErrorCode::kOk;
  std::vector<std::optional<Arrival>> arrivals;  // by rank
  std::vector<uint32_t> copies_touching;  // by rank: copies in flight from or into its buffers
  std::vector<bool> delivered;            // by rank: completion written
  // The first rank that arrived with a valid request: every later one must agree with it.
  std::optional<uint32_t> reference_rank;
  uint32_t arrived = 0;
  uint32_t delivered_count = 0;
  uint64_t total_in_flight = 0;

  Collective(uint64_t s, uint32_t nranks)
      : seq(s), arrivals(nranks), copies_touching(nranks, 0), delivered(nranks, false) {}

  const RankArgs* reference() const {
    return reference_rank ? &arrivals[*reference_rank]->request->args : nullptr;
  }
};

}  // namespace iris::daemon
