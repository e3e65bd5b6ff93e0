#include "daemon/collectives/communicator_registry.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "daemon/operations/printable.hpp"
#include "iris/error.hpp"

namespace iris::daemon {

CommunicatorRegistry::CommunicatorRegistry(const Config& config, CollectiveScheduler& scheduler,
                                           Stats& stats)
    : config_(config), scheduler_(scheduler), stats_(stats) {}

void CommunicatorRegistry::count() {
  stats_.communicators.store(comms_.size(), std::memory_order_relaxed);
}

uint64_t CommunicatorRegistry::join(Session& s, const std::string& key, uint32_t nranks,
                                    uint32_t rank, std::shared_ptr<const NodeLayout> layout,
                                    uint64_t resume_seq,
                                    const std::vector<uint64_t>& completed_after) {
  bool resuming = resume_seq != 0;
  if (completed_after.size() > kMaxCompletedAfter ||
      std::any_of(completed_after.begin(), completed_after.end(),
                  [&](uint64_t seq) { return seq <= resume_seq; }))
    throw Error(ErrorCode::kInvalidArgument,
                "a resuming rank's completed collectives must follow its resume_seq " +
                    std::to_string(resume_seq) + ", at most " + std::to_string(kMaxCompletedAfter));
  if (key.empty() || key.size() > kMaxKeyBytes || !is_printable_ascii(key))
    throw Error(ErrorCode::kInvalidArgument,
                "a communicator key must be 1 to " + std::to_string(kMaxKeyBytes) +
                    " bytes of printable ASCII (0x20-0x7e); got " + std::to_string(key.size()) +
                    " bytes: " + printable(key, 64));
  if (nranks == 0 || nranks > kMaxRanks)
    throw Error(ErrorCode::kInvalidArgument, "nranks must be 1 to " + std::to_string(kMaxRanks) +
                                                 ", got " + std::to_string(nranks));
  if (rank >= nranks)
    throw Error(
        ErrorCode::kInvalidArgument,
        "rank " + std::to_string(rank) + " is out of range for nranks " + std::to_string(nranks));
  if (s.comm_ranks.size() >= config_.limits.max_comms_per_session)
    throw Error(ErrorCode::kLimitExceeded,
                "this session already holds ranks in " + std::to_string(s.comm_ranks.size()) +
                    " communicators (max_comms); destroy some or raise --max-comms");
  Communicator* comm = nullptr;
  if (auto it = by_key_.find(key); it != by_key_.end()) {
    comm = comms_.at(it->second).get();
    // An init in flight when irisd restarted is sent again as a new join, while the ranks that
    // had joined resume: before the first collective (every rank at seq 1, nothing completed)
    // joining and resuming are the same, so each joins as the communicator was made.
    if (comm->resumed != resuming && comm->before_first_collective() && resume_seq <= 1 &&
        completed_after.empty()) {
      resuming = comm->resumed;
      resume_seq = resuming ? 1 : 0;
    }
    if (comm->resumed != resuming)
      throw Error(ErrorCode::kAlreadyExists,
                  "communicator '" + key + "' " +
                      (resuming ? "was created anew since irisd restarted, so this rank cannot "
                                  "resume in it: use another key for new jobs"
                                : "is resuming after irisd restarted (its ranks are coming back): "
                                  "use another key"));
    if (comm->nranks != nranks)
      throw Error(ErrorCode::kNranksMismatch, "communicator '" + key + "' has nranks " +
                                                  std::to_string(comm->nranks) +
                                                  ", this rank passed " + std::to_string(nranks));
    if (comm->uid != s.peer().uid && !config_.allow_cross_uid_comms)
      throw Error(ErrorCode::kPermissionDenied,
                  "communicator '" + key + "' belongs to uid " + std::to_string(comm->uid) +
                      "; irisd is configured to keep users apart (allow_cross_uid_comms)");
    if (static_cast<bool>(comm->layout) != static_cast<bool>(layout) ||
        (layout && !(*comm->layout == *layout)))
      throw Error(ErrorCode::kInvalidArgument,
                  "communicator '" + key +
                      "' was created here with other nodes, rank placement or secret than this "
                      "rank passed (every rank must pass the same)");
    if (comm->members[rank])
      throw Error(ErrorCode::kAlreadyExists, "rank " + std::to_string(rank) + " of communicator '" +
                                                 key + "' is already taken by session " +
                                                 std::to_string(*comm->members[rank]));
    if (s.comm_ranks.count(comm->id) != 0)
      throw Error(ErrorCode::kAlreadyExists, "this session already holds rank " +
                                                 std::to_string(s.comm_ranks[comm->id]) +
                                                 " of communicator '" + key + "'");
  } else {
    auto created = std::make_unique<Communicator>();
    created->id = next_id_++;
    created->key = key;
    created->nranks = nranks;
    created->uid = s.peer().uid;
    created->members.resize(nranks);
    created->next_seq.assign(nranks, 1);
    created->layout = std::move(layout);
    if (resuming) {
      created->resumed = true;
      created->resumed_from.assign(nranks, 0);
      created->resumed_done.resize(nranks);
      created->resume_deadline = std::chrono::steady_clock::now() +
                                 std::chrono::milliseconds(config_.limits.resume_window_ms);
      resuming_.push_back(created->id);
    }
    comm = created.get();
    by_key_.emplace(key, comm->id);
    comms_.emplace(comm->id, std::move(created));
    count();
  }
  comm->members[rank] = s.id();
  s.comm_ranks.emplace(comm->id, rank);
  if (resuming) {
    comm->next_seq[rank] = resume_seq;
    comm->resumed_from[rank] = resume_seq;
    comm->resumed_done[rank] = {completed_after.begin(), completed_after.end()};
    if (resume_seq > 1 || !completed_after.empty()) comm->resumed_after_collectives = true;
    if (comm->all_local_joined()) comm->resume_deadline.reset();
    scheduler_.resumed_rank(*comm, rank);
  }
  scheduler_.log().log(spdlog::level::info, s.peer().uid, TenantLogKind::kCommunicator,
                       "session {} joined communicator '{}' (id {}) as rank {}/{}", s.id(), key,
                       comm->id, rank, nranks);
  return comm->id;
}

void CommunicatorRegistry::leave(Session& s, uint64_t comm_id, const std::string& how) {
  auto rank_it = s.comm_ranks.find(comm_id);
  if (rank_it == s.comm_ranks.end())
    throw Error(ErrorCode::kNotFound,
                "this session holds no rank in communicator " + std::to_string(comm_id));
  Communicator& comm = *comms_.at(comm_id);
  const uint32_t rank = rank_it->second;
  comm.members[rank].reset();
  s.comm_ranks.erase(rank_it);
  if (comm.joined() > 0)
    scheduler_.break_comm(comm, ErrorCode::kPeerLost,
                          "rank " + std::to_string(rank) + " of communicator '" + comm.key +
                              "' (session " + std::to_string(s.id()) + ", pid " +
                              std::to_string(s.peer().pid) + ") " + how +
                              "; create a new communicator to go on");
  if (auto k = by_key_.find(comm.key); k != by_key_.end() && k->second == comm_id)
    by_key_.erase(k);  // the key is free for a new communicator
  remove_if_unused(comm_id);
}

void CommunicatorRegistry::remove_if_unused(uint64_t comm_id) {
  auto it = comms_.find(comm_id);
  if (it == comms_.end()) return;
  Communicator& comm = *it->second;
  if (comm.joined() != 0) return;
  // Copies still in flight reference the communicator: it goes once they have finished.
  for (auto& [seq, c] : comm.in_flight) {
    if (c.total_in_flight != 0) {
      if (std::find(emptied_.begin(), emptied_.end(), comm_id) == emptied_.end())
        emptied_.push_back(comm_id);
      return;
    }
  }
  scheduler_.break_comm(comm, ErrorCode::kPeerLost, "every rank left the communicator");
  if (comm.in_flight.empty()) {
    scheduler_.forget_comm(comm);
    comms_.erase(it);
    count();
  }
}

void CommunicatorRegistry::expire_resumes() {
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(resuming_, [&](uint64_t id) {
    Communicator* comm = find(id);
    if (comm == nullptr || !comm->resume_deadline) return true;
    if (now < *comm->resume_deadline) return false;
    comm->resume_deadline.reset();
    std::string missing;
    for (uint32_t r = 0; r < comm->nranks; ++r)
      if (comm->is_local(r) && !comm->members[r])
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    scheduler_.break_comm(*comm, ErrorCode::kPeerLost,
                          "rank(s) " + missing + " of communicator '" + comm->key +
                              "' did not come back within " +
                              std::to_string(config_.limits.resume_window_ms) +
                              " ms after irisd restarted (--resume-window-ms); create a new "
                              "communicator to go on");
    if (auto k = by_key_.find(comm->key); k != by_key_.end() && k->second == id) by_key_.erase(k);
    return true;
  });
}

bool CommunicatorRegistry::poll() {
  if (!resuming_.empty()) expire_resumes();
  if (emptied_.empty()) return false;
  auto emptied = std::move(emptied_);
  emptied_.clear();
  for (uint64_t id : emptied) remove_if_unused(id);
  return false;
}

Communicator* CommunicatorRegistry::find(uint64_t id) const {
  auto it = comms_.find(id);
  return it == comms_.end() ? nullptr : it->second.get();
}

}  // namespace iris::daemon
