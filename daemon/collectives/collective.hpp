// One collective matched by (communicator, seq) across ranks: who has arrived with what, which
// copies are in flight, who has been told. Only ranks that arrived have an entry, so a
// collective waiting on a large communicator costs memory for what arrived, not for nranks.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "daemon/collectives/request_validation.hpp"
#include "daemon/sessions/completion_target.hpp"
#include "iris/error_code.hpp"

namespace iris::daemon {

struct ArrivedRank {
  CompletionTarget target;
  std::optional<ValidatedRequest> request;  // empty when the rank's request failed validation
  uint32_t copies_touching = 0;             // copies (and network sends) in flight on its buffers
  bool delivered = false;                   // completion written
  // A rank of another node (scale out): its request's send buffer holds the part of its data
  // this node needs, and its own daemon completes it.
  bool remote = false;
};

struct Collective {
  uint64_t seq = 0;
  uint32_t nranks = 0;
  ErrorCode error = ErrorCode::kOk;
  std::string why;                        // the first failure, in words every rank's client shows
  std::map<uint32_t, ArrivedRank> ranks;  // by rank, arrived ones only
  // The first rank that arrived with a valid request: every later one must agree with it.
  std::optional<uint32_t> reference_rank;
  uint32_t delivered_count = 0;
  uint64_t total_in_flight = 0;
  std::chrono::steady_clock::time_point started;

  uint32_t arrived() const { return static_cast<uint32_t>(ranks.size()); }
  // Every rank has arrived, or the collective failed: before that no rank is delivered.
  bool settled() const { return error != ErrorCode::kOk || arrived() == nranks; }
  const RankArgs* reference() const {
    return reference_rank ? &ranks.at(*reference_rank).request->args : nullptr;
  }
};

}  // namespace iris::daemon
