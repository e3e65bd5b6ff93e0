#include "daemon/collectives/communicator_registry.hpp"

#include <malloc.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "daemon/operations/printable.hpp"
#include "iris/error.hpp"

namespace iris::daemon {

CommunicatorRegistry::CommunicatorRegistry(const Config& config, CollectiveScheduler& scheduler,
                                           Stats& stats, TenantLog& log)
    : config_(config), scheduler_(scheduler), stats_(stats), log_(log) {}

void CommunicatorRegistry::count() {
  stats_.communicators.store(comms_.size(), std::memory_order_relaxed);
}

namespace {
// Bytes of irisd memory a communicator's state takes, as counted against max_comm_bytes_per_uid:
// its per-rank tables (a resumed one's are larger) and each completed sequence number a resuming
// rank brought (a node of an ordered set).
constexpr uint64_t kCommBytes = sizeof(Communicator) + 256;
constexpr uint64_t kRankBytes = sizeof(std::optional<uint64_t>) + sizeof(uint64_t);
constexpr uint64_t kResumedRankBytes = sizeof(uint64_t) + sizeof(std::set<uint64_t>);
constexpr uint64_t kCompletedSeqBytes = 48;

std::string random_secret() {
  std::string secret(CommunicatorRegistry::kSecretBytes, '\0');
  std::size_t got = 0;
  while (got < secret.size()) {
    const ssize_t r = ::getrandom(secret.data() + got, secret.size() - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      throw Error(ErrorCode::kInternal, std::string("getrandom: ") + std::strerror(errno));
    got += static_cast<std::size_t>(r);
  }
  return secret;
}
}  // namespace

std::string CommunicatorRegistry::scope_of(uid_t uid, const std::string& key) const {
  // Unless users may share communicators, each user's keys are their own: another user's
  // communicator of the same key is never found, so it can neither block nor capture a job.
  return config_.allow_cross_uid_comms ? key : std::to_string(uid) + "/" + key;
}

uint64_t CommunicatorRegistry::charge(uid_t uid, uint64_t bytes) {
  uint64_t& held = bytes_of_uid_[uid];
  const uint64_t limit = config_.limits.max_comm_bytes_per_uid;
  if (bytes > limit - std::min(held, limit)) {
    if (held == 0) bytes_of_uid_.erase(uid);
    throw Error(ErrorCode::kLimitExceeded,
                "uid " + std::to_string(uid) + "'s communicators hold " + std::to_string(held) +
                    " bytes of irisd's memory; this one needs " + std::to_string(bytes) +
                    " more, past max_comm_bytes_per_uid (" + std::to_string(limit) +
                    "): destroy communicators, or ask the operator to raise "
                    "--max-comm-bytes-per-uid");
  }
  held += bytes;
  return bytes;
}

void CommunicatorRegistry::refund(Communicator& comm) {
  for (const auto& [uid, bytes] : comm.charges) {
    auto it = bytes_of_uid_.find(uid);
    if (it == bytes_of_uid_.end()) continue;
    it->second -= std::min(it->second, bytes);
    if (it->second == 0) bytes_of_uid_.erase(it);
    freed_since_trim_ += bytes;
  }
  comm.charges.clear();
}

uint64_t CommunicatorRegistry::bytes_of_uid(uid_t uid) const {
  auto it = bytes_of_uid_.find(uid);
  return it == bytes_of_uid_.end() ? 0 : it->second;
}

Communicator* CommunicatorRegistry::accepting(const std::string& lookup) const {
  auto it = by_key_.find(lookup);
  return it == by_key_.end() ? nullptr : find(it->second);
}

uint64_t CommunicatorRegistry::join(Session& s, const std::string& key, uint32_t nranks,
                                    uint32_t rank, std::shared_ptr<const NodeLayout> layout,
                                    const Resume& resume, const CommSettings& settings) {
  try {
    return join_checked(s, key, nranks, rank, std::move(layout), resume, settings);
  } catch (const Error& e) {
    if (resume.seq != 0) {
      // The operator sees who was refused, and whose communicator of that key is here.
      std::string owners;
      for (const auto& [id, comm] : comms_)
        if (comm->key == key)
          owners += (owners.empty() ? "" : ", ") + std::to_string(comm->id) + " of uid " +
                    std::to_string(comm->uid);
      log_.warn(s.peer().uid, TenantLogKind::kCommunicator,
                "session {} (pid {} uid {}) could not resume communicator '{}' "
                "(communicators of that key here: {}): {}",
                s.id(), s.peer().pid, s.peer().uid, printable(key, 64),
                owners.empty() ? "none" : owners, e.message());
    }
    throw;
  }
}

uint64_t CommunicatorRegistry::join_checked(Session& s, const std::string& key, uint32_t nranks,
                                            uint32_t rank, std::shared_ptr<const NodeLayout> layout,
                                            const Resume& resume, const CommSettings& settings) {
  uint64_t resume_seq = resume.seq;  // an init in flight at the restart may turn it into a join
  const std::vector<uint64_t>& completed_after = resume.completed_after;
  const std::string& secret = resume.secret;
  const std::vector<ChannelProgress>& p2p_progress = resume.p2p_progress;
  bool resuming = resume_seq != 0;
  uint64_t progress_entries = 0;
  for (const ChannelProgress& p : p2p_progress) {
    progress_entries += 1 + p.done_after.size();
    if (!resuming || p.peer >= nranks || p.done_after.size() > kMaxCompletedAfter ||
        std::any_of(p.done_after.begin(), p.done_after.end(),
                    [&](uint64_t k) { return k <= p.done_below; }))
      throw Error(ErrorCode::kInvalidArgument,
                  "a resuming rank's send/receive progress must name peers below nranks, with at "
                  "most " +
                      std::to_string(kMaxCompletedAfter) +
                      " positions after each channel's done_below (and only when resuming)");
  }
  if (p2p_progress.size() > 2 * uint64_t{nranks})
    throw Error(ErrorCode::kInvalidArgument,
                "a resuming rank has at most two point-to-point channels per peer (" +
                    std::to_string(2 * uint64_t{nranks}) + "), got " +
                    std::to_string(p2p_progress.size()));
  if (resuming && !s.resumed())
    throw Error(ErrorCode::kPermissionDenied,
                "only a session resuming after irisd restarted may resume a communicator; a new "
                "session joins with resume_seq 0");
  // libiris of the previous release resumes without a secret. Where keys are each user's own
  // that is only the same user's word, so it is taken (its ranks meet one another); where users
  // share communicators the secret is what keeps another user out.
  const bool secretless_ok = secret.empty() && !config_.allow_cross_uid_comms;
  if (resuming && secret.size() != kSecretBytes && !secretless_ok)
    throw Error(ErrorCode::kInvalidArgument,
                "resuming communicator '" + printable(key, 64) + "' takes the " +
                    std::to_string(kSecretBytes) +
                    "-byte secret irisd gave it at creation (users share communicators here, "
                    "allow_cross_uid_comms; a libiris older than this irisd does not send it): "
                    "create a new communicator");
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
  const uid_t uid = s.peer().uid;
  const std::string scope = scope_of(uid, key);
  // A new communicator is found by its scope and key; a resumed one by its secret as well.
  const std::string new_lookup = "new/" + scope;
  const std::string resumed_lookup = "resumed/" + scope + '\0' + secret;
  Communicator* comm = accepting(resuming ? resumed_lookup : new_lookup);
  // An init in flight when irisd restarted is sent again as a new join, while the ranks that had
  // joined resume: before the first collective (every rank at seq 1, nothing completed) joining
  // and resuming are the same, so each joins as the communicator was made, if it is this user's.
  auto same_before_first = [&](const Communicator* c) {
    return c != nullptr && c->uid == uid && c->before_first_collective() && !c->members[rank];
  };
  if (comm == nullptr && resuming && resume_seq <= 1 && completed_after.empty() &&
      p2p_progress.empty()) {
    if (Communicator* fresh = accepting(new_lookup); same_before_first(fresh)) {
      comm = fresh;
      resuming = false;
      resume_seq = 0;
    }
  }
  if (comm == nullptr && !resuming) {
    for (uint64_t id : resuming_) {
      Communicator* c = find(id);
      if (c != nullptr && c->lookup.rfind("resumed/" + scope + '\0', 0) == 0 &&
          same_before_first(c)) {
        comm = c;
        resuming = true;
        resume_seq = 1;
        break;
      }
    }
  }
  uint64_t completed_bytes =
      resuming ? (completed_after.size() + progress_entries) * kCompletedSeqBytes : 0;
  if (comm != nullptr) {
    if (comm->nranks != nranks)
      throw Error(ErrorCode::kNranksMismatch, "communicator '" + key + "' has nranks " +
                                                  std::to_string(comm->nranks) +
                                                  ", this rank passed " + std::to_string(nranks));
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
    if (completed_bytes != 0) comm->charges.emplace_back(uid, charge(uid, completed_bytes));
  } else {
    const uint64_t bytes = kCommBytes + key.size() +
                           nranks * (kRankBytes + (resuming ? kResumedRankBytes : 0)) +
                           completed_bytes;
    charge(uid, bytes);
    auto created = std::make_unique<Communicator>();
    created->charges.emplace_back(uid, bytes);
    created->id = next_id_++;
    created->key = key;
    created->nranks = nranks;
    created->uid = uid;
    created->secret = resuming ? secret : random_secret();
    created->lookup = resuming ? resumed_lookup : new_lookup;
    created->members.resize(nranks);
    created->next_seq.assign(nranks, 1);
    created->layout = std::move(layout);
    created->op_timeout = settings.op_timeout;
    created->traffic_class = settings.traffic_class;
    created->latency_granted = settings.latency_granted;
    if (resuming) {
      created->resumed = true;
      created->resumed_from.assign(nranks, 0);
      created->resumed_done.resize(nranks);
      created->resume_deadline = std::chrono::steady_clock::now() +
                                 std::chrono::milliseconds(config_.limits.resume_window_ms);
      resuming_.push_back(created->id);
      // Someone else's communicator of this key (another secret) goes on beside it, untouched.
      for (const auto& [id, other] : comms_)
        if (other->key == key && other->uid != uid)
          log_.warn(uid, TenantLogKind::kCommunicator,
                    "session {} (pid {} uid {}) resumes communicator '{}' apart from "
                    "communicator {} of uid {}, which has another secret",
                    s.id(), s.peer().pid, uid, printable(key, 64), other->id, other->uid);
    }
    comm = created.get();
    by_key_.emplace(comm->lookup, comm->id);
    comms_.emplace(comm->id, std::move(created));
    count();
  }
  comm->members[rank] = s.id();
  s.comm_ranks.emplace(comm->id, rank);
  if (resuming) {
    comm->next_seq[rank] = resume_seq;
    comm->resumed_from[rank] = resume_seq;
    comm->resumed_done[rank] = {completed_after.begin(), completed_after.end()};
    for (const ChannelProgress& p : p2p_progress) {
      const auto channel = p.send ? std::make_pair(rank, p.peer) : std::make_pair(p.peer, rank);
      auto& done = (p.send ? comm->sends_done : comm->recvs_done)[channel];
      done.below = std::max<uint64_t>(1, p.done_below);
      done.after = {p.done_after.begin(), p.done_after.end()};
    }
    if (resume_seq > 1 || !completed_after.empty() || !p2p_progress.empty())
      comm->resumed_after_collectives = true;
    if (comm->all_local_joined()) comm->resume_deadline.reset();
    scheduler_.resumed_rank(*comm, rank);
  }
  log_.log(spdlog::level::info, uid, TenantLogKind::kCommunicator,
           "session {} {} communicator '{}' (id {}) as rank {}/{}", s.id(),
           resuming ? "resumed" : "joined", key, comm->id, rank, nranks);
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
  if (auto k = by_key_.find(comm.lookup); k != by_key_.end() && k->second == comm_id)
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
    refund(comm);
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
    if (auto k = by_key_.find(comm->lookup); k != by_key_.end() && k->second == id)
      by_key_.erase(k);
    return true;
  });
}

bool CommunicatorRegistry::poll() {
  if (!resuming_.empty()) expire_resumes();
  // Large communicators gone: give their memory back to the system rather than keep it in the
  // allocator's free lists (what one user made irisd hold does not stay after it).
  if (freed_since_trim_ >= kTrimAfterBytes) {
    freed_since_trim_ = 0;
    ::malloc_trim(0);
  }
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
