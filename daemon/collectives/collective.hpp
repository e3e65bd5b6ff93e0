// One collective matched by (communicator, seq) across ranks: who has arrived with what, which
// copies are in flight, who has been told.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "daemon/collectives/arrived_ranks.hpp"
#include "iris/error_code.hpp"

namespace iris::daemon {

struct Collective {
  uint64_t seq = 0;
  uint32_t nranks = 0;
  ErrorCode error = ErrorCode::kOk;
  std::string why;     // the first failure, in words every rank's client shows
  ArrivedRanks ranks;  // arrived ones only
  // The first rank that arrived with a valid request: every later one must agree with it.
  std::optional<uint32_t> reference_rank;
  uint32_t delivered_count = 0;
  // Arrival records (ArrivedRanks keeps them in arrival order) whose copies have been planned
  // and started; the records after these wait (CollectiveScheduler::starts_later).
  uint32_t started_records = 0;
  uint64_t total_in_flight = 0;
  std::chrono::steady_clock::time_point started;

  uint32_t arrived() const { return ranks.size(); }
  // Every rank has arrived and every copy has started, or the collective failed: before that
  // no rank is delivered.
  bool settled() const {
    return error != ErrorCode::kOk || (arrived() == nranks && started_records == nranks);
  }
  const RankArgs* reference() const {
    return reference_rank ? &ranks.at(*reference_rank).request->args : nullptr;
  }
  // As new, holding nothing, but with the rank records' memory kept for the next collective.
  void clear() {
    ArrivedRanks kept = std::move(ranks);
    kept.clear();
    *this = Collective{};
    ranks = std::move(kept);
  }
};

}  // namespace iris::daemon
