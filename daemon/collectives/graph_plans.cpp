#include "daemon/collectives/graph_plans.hpp"

#include <spdlog/spdlog.h>

#include "iris/error.hpp"

namespace iris::daemon {

GraphPlans::GraphPlans(CollectiveScheduler& scheduler, Stats& stats, TenantLog& log,
                       std::chrono::milliseconds replay_timeout, uint32_t max_per_uid)
    : scheduler_(scheduler),
      stats_(stats),
      log_(log),
      replay_timeout_(replay_timeout),
      max_per_uid_(max_per_uid) {}

GraphPlans::~GraphPlans() = default;

void GraphPlans::add(Session& s, uint32_t plan_slot, const Communicator& comm, uint32_t rank,
                     ValidatedRequest request, std::optional<PairEnd> pair, bool resumed,
                     uint64_t completed_replays) {
  if (plan_slot >= shm::kGraphPlanSlots)
    throw Error(ErrorCode::kInvalidArgument,
                "graph plan slot " + std::to_string(plan_slot) + " is out of range (" +
                    std::to_string(shm::kGraphPlanSlots) + " per session)");
  const PlanKey key{s.id(), plan_slot};
  if (plans_.count(key) != 0)
    throw Error(ErrorCode::kAlreadyExists,
                "graph plan slot " + std::to_string(plan_slot) + " already holds a plan");
  uint32_t& held = per_uid_[s.peer().uid];
  if (held >= max_per_uid_)
    throw Error(ErrorCode::kLimitExceeded,
                "uid " + std::to_string(s.peer().uid) + " already holds " + std::to_string(held) +
                    " collectives captured in CUDA graphs (max_graph_plans_per_uid); destroy "
                    "some graphs or ask the operator to raise the limit");
  const Channel channel =
      pair ? Channel{comm.id, pair->src, pair->dst} : Channel{comm.id, kEveryRank, kEveryRank};
  const uint32_t member = pair ? pair->in_pair : rank;
  const uint32_t index = captured_[{channel, member}]++;
  auto& group = groups_[{channel, index}];
  if (!group) {
    group = std::make_unique<Group>();
    group->channel = channel;
    Communicator& shadow = group->shadow;
    shadow.id = next_group_comm_id_++;
    shadow.key = comm.key +
                 (pair ? " send " + std::to_string(pair->src) + "->" + std::to_string(pair->dst)
                       : std::string()) +
                 "#graph" + std::to_string(index);
    shadow.nranks = pair ? 2 : comm.nranks;
    shadow.uid = comm.uid;
    shadow.members.resize(shadow.nranks);
    shadow.next_seq.assign(shadow.nranks, 1);
    if (resumed) {
      shadow.resumed = true;
      shadow.resumed_from.assign(shadow.nranks, 0);
      shadow.resumed_done.resize(shadow.nranks);
    }
  }
  Group& g = *group;
  if (g.shadow.members[member] || g.shadow.broken) {
    // This rank's earlier plan of the same index was released: the group is over for everyone.
    throw Error(ErrorCode::kPeerLost,
                "communicator '" + comm.key + "' graph collective #" + std::to_string(index) +
                    " can no longer be captured: " +
                    (g.shadow.broken ? g.shadow.broken_why : std::string("rank already holds it")));
  }
  g.shadow.members[member] = s.id();
  ++g.holders;
  ++held;
  if (resumed && g.shadow.resumed) {
    // Its replays before this one completed under the previous irisd; a ready flag still set is
    // the replay that was in flight.
    g.shadow.resumed_from[member] = completed_replays + 1;
    scheduler_.resumed_rank(g.shadow, member);
  } else {
    // The slot's flags start clear: a stale ready flag must not start a replay.
    s.reset_plan_flags(plan_slot);
    completed_replays = 0;
  }
  plans_.emplace(key, Plan{&s, plan_slot, member, &g, std::move(request), completed_replays});
  stats_.graph_plans.store(plans_.size(), std::memory_order_relaxed);
  spdlog::debug("session {} captured '{}' graph collective #{} as rank {} (plan slot {})", s.id(),
                comm.key, index, rank, plan_slot);
}

void GraphPlans::release(Session& s, uint32_t plan_slot) {
  auto it = plans_.find({s.id(), plan_slot});
  if (it == plans_.end())
    throw Error(ErrorCode::kNotFound,
                "graph plan slot " + std::to_string(plan_slot) + " holds no plan");
  release_plan(it, "released it (its CUDA graph was destroyed)");
}

void GraphPlans::release_comm(const Session& s, uint64_t comm_id, const std::string& how) {
  for (auto it = plans_.lower_bound({s.id(), 0});
       it != plans_.end() && it->first.first == s.id();) {
    auto next = std::next(it);
    if (it->second.group->channel.comm == comm_id) release_plan(it, how);
    it = next;
  }
  auto rank = s.comm_ranks.find(comm_id);
  if (rank == s.comm_ranks.end()) return;
  // Its capture counts: of the communicator's collectives, and of its sends and receives.
  for (auto it = captured_.lower_bound({Channel{comm_id, 0, 0}, 0});
       it != captured_.end() && it->first.first.comm == comm_id;) {
    const auto& [channel, member] = it->first;
    it = channel.rank_of(member) == rank->second ? captured_.erase(it) : std::next(it);
  }
}

void GraphPlans::release_plan(std::map<PlanKey, Plan>::iterator it, const std::string& why) {
  Plan& p = it->second;
  Group& g = *p.group;
  g.shadow.members[p.member].reset();
  --g.holders;
  if (auto held = per_uid_.find(p.session->peer().uid);
      held != per_uid_.end() && --held->second == 0)
    per_uid_.erase(held);
  break_group(g, ErrorCode::kPeerLost,
              "rank " + std::to_string(g.channel.rank_of(p.member)) + " of communicator '" +
                  g.shadow.key + "' " + why + "; capture the graph again on every rank");
  plans_.erase(it);
  stats_.graph_plans.store(plans_.size(), std::memory_order_relaxed);
}

void GraphPlans::break_group(Group& g, ErrorCode code, const std::string& why) {
  if (g.shadow.broken) return;
  log_.log(spdlog::level::info, g.shadow.uid, TenantLogKind::kCommunicator,
           "graph collective '{}' ends: {}", g.shadow.key, why);
  scheduler_.break_comm(g.shadow, code, why);
}

bool GraphPlans::poll() {
  if (idle()) return false;
  bool arrived = false;
  for (auto& [key, p] : plans_) {
    if (p.in_replay || !p.session->plan_ready(p.plan_slot)) continue;
    p.in_replay = true;
    ++p.replays;
    stats_.graph_replays_total.fetch_add(1, std::memory_order_relaxed);
    // The plan's flags and completion are at ring depth + plan slot.
    const CompletionTarget target{p.session->id(), p.session->ring_depth() + p.plan_slot,
                                  static_cast<uint32_t>(p.replays), true};
    scheduler_.arrive(p.group->shadow, p.member, p.replays, target, ValidatedRequest(p.request));
    arrived = true;
  }
  const auto now = std::chrono::steady_clock::now();
  if (now >= next_timeout_check_) {
    next_timeout_check_ = now + std::chrono::milliseconds(100);
    fail_overdue(now);
    remove_idle_groups();
  }
  return arrived;
}

void GraphPlans::replay_done(uint64_t session_id, uint32_t plan_slot) {
  auto it = plans_.find({session_id, plan_slot});
  if (it != plans_.end()) it->second.in_replay = false;
}

void GraphPlans::fail_overdue(std::chrono::steady_clock::time_point now) {
  for (auto& [key, g] : groups_) {
    if (g->shadow.broken || g->shadow.in_flight.empty()) continue;
    const Collective& oldest = g->shadow.in_flight.begin()->second;
    if (oldest.arrived() == g->shadow.nranks || now - oldest.started < replay_timeout_) continue;
    std::string missing;
    for (uint32_t r = 0; r < g->shadow.nranks; ++r)
      if (!oldest.ranks.contains(r))
        missing += (missing.empty() ? "" : ", ") + std::to_string(g->channel.rank_of(r));
    break_group(*g, ErrorCode::kTimeout,
                "replay " + std::to_string(oldest.seq) + " of '" + g->shadow.key +
                    "' waited more than " + std::to_string(replay_timeout_.count()) +
                    " ms for rank(s) " + missing +
                    ": every rank must replay the graphs it captured the same number of times");
  }
}

void GraphPlans::remove_idle_groups() {
  for (auto it = groups_.begin(); it != groups_.end();) {
    const Group& g = *it->second;
    // Copies in flight point at the group's communicator: it stays until they are done.
    if (g.holders == 0 && g.shadow.in_flight.empty()) {
      it = groups_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace iris::daemon
