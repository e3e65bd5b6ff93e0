// Matches all-gathers across ranks by (communicator, seq) and drives their copies.
//
// When rank r's request arrives, every rank j already there gets r's block (r -> j) and r gets
// j's block (j -> r) at once: no barrier waits for the last rank. Rank j completes when all
// nranks blocks have landed in its receive buffer and its own block has landed at every rank, so
// that it may reuse both buffers the moment its wait returns. A failure (size mismatch, a bad
// request from one rank, an engine error, a lost peer) fails the collective for every rank, each
// rank's error written only after the engine has finished every copy into its buffer.
#pragma once

#include <functional>
#include <unordered_map>

#include "daemon/communicator.hpp"
#include "daemon/engines/engine.hpp"
#include "daemon/stats.hpp"

namespace iris::daemon {

class AllGatherScheduler {
 public:
  using CompleteFn = std::function<void(const CompletionTarget&, ErrorCode)>;

  AllGatherScheduler(Engine& engine, Stats& stats, CompleteFn complete, uint64_t max_in_flight);

  // Rank `rank` submits collective `seq`: `plan` when it validated, else `error`. The caller has
  // checked that the session is the communicator's rank `rank`.
  void arrive(Communicator& comm, uint32_t rank, uint64_t seq, const CompletionTarget& target,
              std::optional<ValidatedAllGather> plan, ErrorCode error);

  void on_copy_complete(const CopyCompletion& completion);

  // A rank died or left: every collective in flight fails with `code`, and so does every later one.
  void break_comm(Communicator& comm, ErrorCode code);

  uint64_t collectives_in_flight() const { return collectives_in_flight_; }

 private:
  struct CopyTag {
    Communicator* comm;
    Collective* collective;
    uint32_t src_rank;
    uint32_t dst_rank;
  };

  Collective* find_or_create(Communicator& comm, uint64_t seq, bool& over_limit);
  void start_copies(Communicator& comm, Collective& c, uint32_t rank);
  void add_copy(Communicator& comm, Collective& c, uint32_t src, uint32_t dst);
  void fail(Collective& c, ErrorCode code);
  void try_deliver(Collective& c, uint32_t rank);
  void retire_if_done(Communicator& comm, Collective& c);

  Engine& engine_;
  Stats& stats_;
  CompleteFn complete_;
  uint64_t max_in_flight_;
  uint64_t collectives_in_flight_ = 0;
  uint64_t next_cookie_ = 1;
  std::unordered_map<uint64_t, CopyTag> copies_;
  std::vector<CopyRequest> batch_;
};

}  // namespace iris::daemon
