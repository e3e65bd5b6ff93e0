// Executes collective plans: matches requests across ranks by (communicator, seq) and issues
// each copy of the plan (plan.hpp) as soon as both its ends have arrived: when rank r arrives,
// the copies between r and every rank already there start at once, so no barrier waits for the
// last rank. Except while users share the node's engines (CopyDispatcher::pacing_now): then the
// copies of a small latency collective within this node start together once its last rank
// arrived, since each submission waits its own turn at an engine behind the other users' slices
// and one per arrival waited a turn per arrival (starts_later). A rank completes once every rank
// has arrived and no copy reads or writes its buffers any more, so it may reuse them the moment
// its wait returns. A failure (ranks that disagree, a bad request from one rank, an engine error,
// a lost peer) fails the collective for every rank, each rank's error written only after the
// engine has finished every copy into or out of its buffers.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "daemon/collectives/communicator.hpp"
#include "daemon/collectives/network_hold.hpp"
#include "daemon/engines/copy_dispatcher.hpp"
#include "daemon/engines/engine.hpp"
#include "daemon/node_spares.hpp"
#include "daemon/operations/tenant_log.hpp"
#include "daemon/progress_loop.hpp"
#include "daemon/stats.hpp"

#include <spdlog/spdlog.h>

namespace iris::daemon {

// The other nodes of multi-node communicators (daemon/scaleout), as the scheduler needs them.
class RemoteNodes {
 public:
  virtual ~RemoteNodes() = default;
  // Local rank `rank` arrived at `c`: its arguments and the data the other nodes need go to
  // them (or its failure, when it or the collective failed). Returns why it cannot. Each transfer
  // started for it takes a part of `hold` (split) and ends it: the rank's buffers are held until
  // every part has ended.
  virtual std::optional<PlanError> send_arrival(Communicator& comm, Collective& c, uint32_t rank,
                                                const NetworkHold& hold) = 0;
  // The communicator broke here (a local rank died or left): the other nodes are told.
  virtual void broke_here(Communicator& comm, const std::string& why) = 0;
  // Collective `seq` retired here: every rank of this node is done with it.
  virtual void retired(Communicator& comm, uint64_t seq) = 0;
  // The communicator is gone from this node.
  virtual void forget(const Communicator& comm) = 0;
};

class CollectiveScheduler final : CopyOwner, NetworkHoldOwner {
 public:
  // Writes a rank's completion (the Completer's): the code, and why it failed in words the
  // client shows.
  using CompleteFn = std::function<void(const CompletionTarget&, ErrorCode, const std::string&)>;

  // `max_in_flight`: collectives in flight per communicator; more fail with kLimitExceeded.
  // `log` limits the lines a communicator's tenant causes. Copies go to the engine through
  // `copies`, which brings their completions back (copy_done).
  CollectiveScheduler(CopyDispatcher& copies, Stats& stats, TenantLog& log, CompleteFn complete,
                      uint64_t max_in_flight);

  // Rank `rank` submits collective `seq` with `request`. The caller has checked that the session
  // is the communicator's rank `rank`.
  void arrive(Communicator& comm, uint32_t rank, uint64_t seq, const CompletionTarget& target,
              ValidatedRequest&& request);
  // The same rank's request did not validate: `error` and `why` fail the collective everywhere.
  void arrive_failed(Communicator& comm, uint32_t rank, uint64_t seq,
                     const CompletionTarget& target, ErrorCode error, const std::string& why);

  // Rank `rank` of another node arrived at collective `seq` (scale out): `request` when its
  // message checked out, its send buffer holding the data this node needs; else `error`.
  void arrive_remote(Communicator& comm, uint32_t rank, uint64_t seq,
                     std::optional<ValidatedRequest>&& request, ErrorCode error = ErrorCode::kOk,
                     const std::string& why = {});
  void set_remote_nodes(RemoteNodes* remote) { remote_ = remote; }
  // The registry drops `comm`: what the other nodes' part keeps for it goes too.
  void forget_comm(const Communicator& comm) {
    if (comm.layout && remote_ != nullptr) remote_->forget(comm);
  }
  // A rank died or left: every collective in flight fails with `code` (`why` says who), and so
  // does every later one. `from_remote`: another node said so (it is not told back).
  void break_comm(Communicator& comm, ErrorCode code, const std::string& why,
                  bool from_remote = false);

  // Rank `rank` came back after irisd restarted (comm.resumed_from[rank]): it completed every
  // collective before that sequence number, so in those it counts as arrived and done, moving
  // nothing. The re-run of such a collective copies only between the ranks that had not completed
  // it: a rank completes only once no copy touches its buffers, so every copy to or from a rank
  // that completed had landed, and the others' buffers cannot have changed since (their callers
  // are still waiting, or their streams still blocked), so copying between them again writes the
  // same bytes.
  void resumed_rank(Communicator& comm, uint32_t rank);

  uint64_t collectives_in_flight() const { return collectives_in_flight_; }

 private:
  struct CopyTag {
    Communicator* comm;
    Collective* collective;
    uint32_t src_rank;
    uint32_t dst_rank;
    bool network = false;  // a hold for transfers to other nodes, not an engine copy
  };

  // CopyOwner: an engine copy ended, its part of a collective with it.
  void copy_done(uint64_t tag, const CopyCompletion& completion) override;
  // NetworkHoldOwner: the transfers to other nodes reading a rank's buffers ended.
  void network_ended(uint64_t tag, ErrorCode code, const std::string& why) override;

  // A local rank's arrival, `request` moved into its record when not null.
  void arrive_local(Communicator& comm, uint32_t rank, uint64_t seq, const CompletionTarget& target,
                    ValidatedRequest* request, ErrorCode error, const std::string& why);
  // After a rank's arrival record is in: checks, copies, the other nodes told, deliveries.
  void admit(Communicator& comm, Collective& c, uint32_t rank, ArrivedRank& arrived,
             bool over_limit, ErrorCode error, const std::string& why);
  // A copy or network transfer ended: its ranks may complete, or the collective fails.
  void finish_transfer(const CopyTag& tag, ErrorCode code, const std::string& failure);

  Collective* find_or_create(Communicator& comm, uint64_t seq, bool& over_limit);
  // Ranks that completed `c` under the previous irisd (resumed_rank) enter it as done.
  void add_resumed_ranks(const Communicator& comm, Collective& c);
  // Whether the arrival of a rank with `args` leaves `c`'s copies to a later arrival: a latency
  // collective of one node's ranks whose copies fit in one slice, not yet complete, while users
  // share the engines.
  bool starts_later(const Communicator& comm, const Collective& c, const RankArgs& args) const;
  // Issues the copies of the arrivals not started yet (Collective::started_records), each
  // between its rank and the ranks arrived before it, as one submission; the first disagreement
  // found instead, after issuing what came before it. Copies between host memory within the
  // engine's copy_now_share are done before it returns, untracked; the others complete through
  // poll().
  std::optional<PlanError> start_copies(Communicator& comm, Collective& c);
  // Plans into planned_ the copies between the rank of arrival record `record` and the ranks of
  // the records before it, both ways; false with `bad` set at the first disagreement, after
  // planning what came before it.
  bool plan_arrival(const Communicator& comm, Collective& c, uint32_t record,
                    std::optional<PlanError>& bad);
  // Adds the copy from `src`'s send buffer to `dst`'s receive buffer, if any, to planned_; false
  // with `bad` set when the two ranks' arguments disagree.
  bool plan_copy(const Communicator& comm, uint32_t src, ArrivedRank& from_rank, uint32_t dst,
                 ArrivedRank& to_rank, std::optional<PlanError>& bad);
  void fail(Collective& c, ErrorCode code, const std::string& why);
  void deliver_all(Collective& c);
  void try_deliver(Collective& c, uint32_t rank);
  void try_deliver(Collective& c, ArrivedRank& arrived);
  // A debug line of a collective's life (arrival, start, end), rate-limited per communicator.
  template <typename... Args>
  void trace(Communicator& comm, fmt::format_string<Args...> format, Args&&... args);
  // A warning a communicator's ranks caused, rate-limited per communicator.
  template <typename... Args>
  void comm_warn(Communicator& comm, fmt::format_string<Args...> format, Args&&... args);
  // Whether a rank that has not arrived at `c` may still come (it is a member yet).
  bool may_still_arrive(const Communicator& comm, const Collective& c) const;
  void retire_if_done(Communicator& comm, Collective& c);

  CopyDispatcher& copies_;
  Stats& stats_;
  TenantLog& log_;
  CompleteFn complete_;
  RemoteNodes* remote_ = nullptr;
  uint64_t max_in_flight_;
  // Copies hand the engine their buffers' owners only where it needs them (see CopyRequest).
  bool fill_owners_;
  uint64_t collectives_in_flight_ = 0;
  // Map nodes of retired collectives, with their rank records' memory, for the next ones. The
  // cap: a session's default ring depth (256 requests in flight) of collectives, so that steady
  // traffic allocates nothing; a larger burst frees its extra.
  NodeSpares<std::map<uint64_t, Collective>> spare_collectives_{256};
  // Copies and network holds in flight, by tag: (generation << 32) | index into tags_, so that
  // finding one is an index and a stale or unknown tag is recognised; slots are reused, never
  // freed.
  struct TagSlot {
    CopyTag tag{};
    uint32_t generation = 0;
    bool used = false;
  };
  uint64_t add_tag(const CopyTag& tag);
  CopyTag* find_tag(uint64_t cookie);
  void release_tag(uint64_t cookie);
  std::vector<TagSlot> tags_;
  std::vector<uint32_t> free_tags_;
  // One planned copy: plain data, a CopyRequest is made only for those the engine gets.
  struct PairCopy {
    const std::byte* src;
    std::byte* dst;
    uint64_t bytes;
    int src_device, dst_device;
    uint32_t src_rank, dst_rank;
    ArrivedRank *from, *to;
  };
  std::vector<PairCopy> planned_;   // arrivals' copies, before they are split
  std::vector<CopyRequest> batch_;  // start_copies' copies for the engine
  std::vector<HostCopy> now_;       // and those it copies at once (Engine::copy_now)
};

}  // namespace iris::daemon
