// Collectives captured into CUDA graphs: persistent plans that every replay of the graph runs,
// with no host call per replay.
//
// A rank's libiris, asked for a stream-ordered collective while the stream is capturing,
// registers the call here once (its buffers, offsets and sizes fixed from then on) in one of the
// session's plan slots, and puts into the graph only stream memory operations on that slot:
// write ready = 1, wait until done >= 1, write done = 0. irisd polls the ready flags of every
// armed plan not in a replay; a 1 is one replay reaching the collective, and the rank arrives at
// replay n of the plan. irisd stores 0 as the replay completes, before its done flag (the graph
// writes 1 again only after the replay's done, so no replay is missed); until then the 1 marks a
// replay in flight, also for the next irisd if this one dies (a resumed plan keeps its flags).
// Constant values and a reset keep the protocol right across any number of replays, with no counter
// to wrap.
//
// Ranks' plans are matched by registration order on the communicator: the k-th plan rank r
// registers on communicator C meets the k-th of every other rank. Each such group matches its
// replays through the ordinary scheduler on a communicator of its own (sequence number = replay
// number), so every plan-based collective works in graphs, and the scheduler's rules (copies as
// soon as both ends are there, completion only once every block landed, failures to every rank)
// hold per replay. A group fails for good (every later replay of every rank completes at once
// with the error) when a rank releases its plan (its graph was destroyed), leaves the
// communicator or dies, or when a replay waits longer than the replay timeout for a rank that
// never replays: the graph's wait always ends and the host sees why in the plan's slot, no
// replay wedges irisd.
//
// Sends and receives are matched per channel instead, as outside graphs (point_to_point.hpp): the
// k-th send plan rank s captures to rank d meets the k-th receive plan d captures from s, as a
// two-rank group (the sender its rank 0).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "daemon/collectives/collective_scheduler.hpp"
#include "daemon/collectives/point_to_point.hpp"
#include "daemon/operations/tenant_log.hpp"
#include "daemon/progress_loop.hpp"
#include "daemon/sessions/session.hpp"
#include "daemon/stats.hpp"
#include "iris/shared/collective_shape.hpp"

namespace iris::daemon {

class GraphPlans final : public Poller {
 public:
  // `max_per_uid`: plans all of one user's sessions may hold; every pass of the progress loop
  // looks at every plan's ready flag, so one tenant's plans must not slow everyone's pass.
  GraphPlans(CollectiveScheduler& scheduler, Stats& stats, TenantLog& log,
             std::chrono::milliseconds replay_timeout, uint32_t max_per_uid);
  ~GraphPlans();

  // Session `s`, rank `rank` of `comm`, captured `request` into plan slot `plan_slot`; `pair`
  // for a send or receive (`request` then validated as that rank of a pair). Throws iris::Error
  // (slot out of range or in use).
  // `resumed`: the session resumes after irisd restarted and its graph completed
  // `completed_replays` replays of this plan under the previous irisd (the slot's flags are kept:
  // a replay in flight then runs now; ranks that completed a replay take no part in its re-run).
  void add(Session& s, uint32_t plan_slot, const Communicator& comm, uint32_t rank,
           ValidatedRequest request, std::optional<PairEnd> pair, bool resumed = false,
           uint64_t completed_replays = 0);
  // A replay of session `session_id`'s plan in `plan_slot` completed (its ready flag is cleared
  // with it): the plan may start its next one.
  void replay_done(uint64_t session_id, uint32_t plan_slot);
  // The plan's graph is gone. Throws kNotFound for a slot that holds no plan.
  void release(Session& s, uint32_t plan_slot);
  // Every plan of a session's rank in a communicator it leaves (or leaves by ending).
  void release_comm(const Session& s, uint64_t comm_id, const std::string& how);

  // Poller: replays that reached their collective since the last poll start; groups whose
  // replay waits too long fail; groups nobody holds and nothing runs in go. True when anything
  // arrived. A replay announces itself only by writing its ready flag, so the loop stays awake
  // while any plan or group is left.
  bool poll() override;
  bool try_enter_sleep() override { return idle(); }

  std::size_t size() const { return plans_.size(); }
  // Nothing to poll: no plan held, no group left with collectives to finish.
  bool idle() const { return plans_.empty() && groups_.empty(); }

 private:
  struct Group;
  struct Plan {
    Session* session;  // valid while the plan is: a session's plans go before it does
    uint32_t plan_slot;
    uint32_t member;  // its rank in the group: the communicator rank, or its rank in the pair
    Group* group;
    ValidatedRequest request;
    uint64_t replays = 0;
    bool in_replay = false;  // its ready flag stays 1 until the replay completes
  };
  // Which plans of a communicator meet: src = dst = kEveryRank for a collective's (every rank's),
  // the channel for a send's and receive's.
  static constexpr uint32_t kEveryRank = UINT32_MAX;
  struct Channel {
    uint64_t comm;
    uint32_t src = kEveryRank;
    uint32_t dst = kEveryRank;
    auto operator<=>(const Channel&) const = default;
    // The communicator rank of the group's rank `member`.
    uint32_t rank_of(uint32_t member) const {
      return src == kEveryRank ? member : member == shm::kSenderInPair ? src : dst;
    }
  };
  struct Group {
    Communicator shadow;  // matches replays; seq = replay number
    Channel channel;
    uint32_t holders = 0;  // plans registered and not released
  };
  using PlanKey = std::pair<uint64_t, uint32_t>;  // session id, plan slot

  void release_plan(std::map<PlanKey, Plan>::iterator it, const std::string& why);
  void break_group(Group& g, ErrorCode code, const std::string& why);
  void fail_overdue(std::chrono::steady_clock::time_point now);
  void remove_idle_groups();

  CollectiveScheduler& scheduler_;
  Stats& stats_;
  TenantLog& log_;
  std::chrono::milliseconds replay_timeout_;
  uint32_t max_per_uid_;
  std::map<uid_t, uint32_t> per_uid_;
  uint64_t next_group_comm_id_ = 1ull << 62;  // apart from the registry's communicator ids
  std::map<PlanKey, Plan> plans_;
  // By (channel, capture index): the k-th plan every member registers there.
  std::map<std::pair<Channel, uint32_t>, std::unique_ptr<Group>> groups_;
  // Plans registered so far by (channel, member): the next one's capture index.
  std::map<std::pair<Channel, uint32_t>, uint32_t> captured_;
  std::chrono::steady_clock::time_point next_timeout_check_{};
};

}  // namespace iris::daemon
