#include "daemon/datapath/arrivals.hpp"

#include <spdlog/spdlog.h>

#include "iris/error.hpp"

namespace iris::daemon {

Arrivals::Arrivals(SessionRegistry& sessions, CommunicatorRegistry& comms,
                   CollectiveScheduler& scheduler, PointToPoint& p2p, Completer& completer,
                   Stats& stats, TenantLog& log)
    : sessions_(sessions),
      comms_(comms),
      scheduler_(scheduler),
      p2p_(p2p),
      completer_(completer),
      stats_(stats),
      log_(log) {}

template <typename... Args>
void Arrivals::session_warn(Session& s, fmt::format_string<Args...> format, Args&&... args) {
  log_.warn(s.peer().uid, TenantLogKind::kSession, "session {} (pid {}): {}", s.id(), s.peer().pid,
            fmt::format(format, std::forward<Args>(args)...));
}

void Arrivals::take(Session& s, const shm::SubmitEntry& e) {
  ++s.submitted;
  add_from_loop(stats_.ring_entries_total, 1);
  if ((e.flags & shm::kResubmitted) != 0)
    stats_.collectives_rerun_total.fetch_add(1, std::memory_order_relaxed);
  if (e.slot >= s.ring_depth()) {
    // Nowhere to report it: the client library never does this.
    session_warn(s, "ring entry names completion slot {} (ring depth {}); dropped", e.slot,
                 s.ring_depth());
    stats_.count_error(ErrorCode::kInvalidArgument);
    return;
  }
  const CompletionTarget target{s.id(), e.slot, e.generation};
  // Every request below gets exactly one completion, which gives its count back.
  ++s.pending;
  if (s.pending > s.ring_depth()) {
    // More requests in flight than completion slots: libiris never does this, a client that
    // reuses slots to pile up work does.
    session_warn(s, "more than {} requests in flight (its ring depth); failing this one",
                 s.ring_depth());
    stats_.count_error(ErrorCode::kLimitExceeded);
    return completer_.complete(target, ErrorCode::kLimitExceeded,
                               "more requests in flight than this session has completion slots "
                               "(its ring depth): wait for some before submitting more");
  }
  if (e.opcode == static_cast<uint32_t>(shm::Opcode::kNop))
    return completer_.complete(target, ErrorCode::kOk);
  if (shm::is_point_to_point(e.opcode)) return take_point_to_point(s, e, target);
  take_collective(s, e, target);
}

Communicator* Arrivals::find_comm(uint64_t id) const {
  Communicator* comm = comms_.find(id);
  return comm != nullptr ? comm : p2p_.find_pair(id);
}

std::variant<Arrivals::Member, ValidationError> Arrivals::member_of(Session& s,
                                                                    const shm::SubmitEntry& e) {
  const shm::CollectiveShape* shape = shm::shape_of(e.opcode);
  if ((shape == nullptr || shape->point_to_point) && !shm::is_point_to_point(e.opcode))
    return ValidationError{ErrorCode::kInvalidArgument,
                           "unknown opcode " + std::to_string(e.opcode) + " in ring entry"};
  auto rank = s.comm_ranks.find(e.comm_id);
  if (rank == s.comm_ranks.end())
    return ValidationError{ErrorCode::kNotFound, "communicator " + std::to_string(e.comm_id) +
                                                     " unknown to this session"};
  return Member{comms_.find(e.comm_id), rank->second};
}

void Arrivals::refuse(Session& s, const CompletionTarget& target, ErrorCode code,
                      const std::string& why) {
  session_warn(s, "request rejected: {}", why);
  stats_.count_error(code);
  completer_.complete(target, code, why);
}

void Arrivals::take_collective(Session& s, const shm::SubmitEntry& e,
                               const CompletionTarget& target) {
  auto reject = [&](ErrorCode code, const std::string& why) { refuse(s, target, code, why); };
  auto member = member_of(s, e);
  if (auto* bad = std::get_if<ValidationError>(&member)) return reject(bad->code, bad->message);
  auto [comm, rank] = std::get<Member>(member);
  const uint64_t expected = comm->next_seq[rank];
  if (e.seq != expected)
    return reject(ErrorCode::kSequenceError,
                  "comm '" + comm->key + "' rank " + std::to_string(rank) + " submitted seq " +
                      std::to_string(e.seq) + ", expected " + std::to_string(expected) +
                      (e.seq < expected ? " (reused)" : " (skipped)"));
  comm->next_seq[rank] = comm->seq_after(rank, expected);

  auto validated =
      validate_request(e, comm->nranks, rank, [&s](uint64_t id) { return s.buffer(id); });
  if (auto* bad = std::get_if<ValidationError>(&validated)) {
    session_warn(s, "comm '{}' seq {} rank {}: {}; failing the collective on every rank", comm->key,
                 e.seq, rank, bad->message);
    scheduler_.arrive_failed(*comm, rank, e.seq, target, bad->code, bad->message);
    return;
  }
  start_when_ready(s, *comm, rank, e.seq, target, std::get<ValidatedRequest>(std::move(validated)));
}

void Arrivals::start_when_ready(Session& s, Communicator& comm, uint32_t rank, uint64_t seq,
                                const CompletionTarget& target, ValidatedRequest&& request) {
  if (request.stream_ordered && !s.device_done_flags) {
    // Nothing the caller's stream waits on could be written (libiris registers the flags
    // before its first stream-ordered request; the host engine cannot import them at all).
    session_warn(s, "stream-ordered request without registered done flags; failing it");
    scheduler_.arrive_failed(
        comm, rank, seq, target, ErrorCode::kInvalidArgument,
        "stream-ordered, but this session registered no done flags (the engine "
        "cannot write GPU memory?)");
    return;
  }
  if (request.stream_ordered && !s.stream_ready(target.slot, target.generation)) {
    awaiting_stream_.push_back(
        {target, comm.id, rank, seq, std::move(request), std::chrono::steady_clock::now()});
    return;
  }
  if (request.stream_ordered)
    stats_.stream_ready_waits_total.fetch_add(1, std::memory_order_relaxed);
  scheduler_.arrive(comm, rank, seq, target, std::move(request));
}

std::variant<Arrivals::PairSide, ValidationError> Arrivals::pair_side(Session& s,
                                                                      const shm::SubmitEntry& e,
                                                                      const Communicator& comm,
                                                                      uint32_t rank) {
  const bool is_send = e.opcode == static_cast<uint32_t>(shm::Opcode::kSend);
  const std::string what = is_send ? "send" : "recv";
  if (e.root >= comm.nranks)
    return ValidationError{ErrorCode::kInvalidArgument, what + ": peer " + std::to_string(e.root) +
                                                            " is out of range for " +
                                                            std::to_string(comm.nranks) + " ranks"};
  // As its side of the pair: the sender is the pair's rank 0 (its root), the receiver rank 1.
  shm::SubmitEntry side = e;
  side.opcode = static_cast<uint32_t>(shm::Opcode::kSendRecv);
  side.root = shm::kSenderInPair;
  const PairEnd end{is_send ? rank : e.root, is_send ? e.root : rank,
                    is_send ? shm::kSenderInPair : shm::kReceiverInPair};
  auto validated =
      validate_request(side, 2, end.in_pair, [&s](uint64_t id) { return s.buffer(id); });
  if (auto* bad = std::get_if<ValidationError>(&validated))
    return ValidationError{bad->code, what + ": " + bad->message};
  return PairSide{end, std::get<ValidatedRequest>(std::move(validated))};
}

void Arrivals::take_point_to_point(Session& s, const shm::SubmitEntry& e,
                                   const CompletionTarget& target) {
  auto reject = [&](ErrorCode code, const std::string& why) { refuse(s, target, code, why); };
  auto member = member_of(s, e);
  if (auto* bad = std::get_if<ValidationError>(&member)) return reject(bad->code, bad->message);
  auto [comm, rank] = std::get<Member>(member);
  if (comm->broken) {
    // A rank left: as for its collectives, every later send and receive fails with why.
    stats_.count_error(comm->broken_code);
    return completer_.complete(target, comm->broken_code, comm->broken_why);
  }
  if (comm->layout)
    return reject(ErrorCode::kUnavailable,
                  "communicator '" + comm->key +
                      "' spans several nodes: send and recv run within one node only (yet)");
  auto side = pair_side(s, e, *comm, rank);
  if (auto* bad = std::get_if<ValidationError>(&side)) return reject(bad->code, bad->message);
  auto& [end, request] = std::get<PairSide>(side);
  auto match = p2p_.post(*comm, end.src, end.dst, end.in_pair == shm::kSenderInPair,
                         {target, std::move(request), e.seq});
  if (!match) return;
  for (PointToPoint::Side* p : {&match->send, &match->recv}) {
    Session* owner = sessions_.find(p->target.session_id);
    const uint32_t pair_rank = p == &match->send ? shm::kSenderInPair : shm::kReceiverInPair;
    if (owner == nullptr) {
      scheduler_.arrive_failed(match->pair, pair_rank, match->seq, p->target, ErrorCode::kPeerLost,
                               "its session ended");
      continue;
    }
    start_when_ready(*owner, match->pair, pair_rank, match->seq, p->target, std::move(p->request));
  }
}

Arrivals::Admitted Arrivals::admit_graph_entry(Session& s, const shm::SubmitEntry& e) {
  if (!s.device_done_flags)
    throw Error(ErrorCode::kInvalidArgument,
                "a graph collective needs the session's GPU done flags, registered with its "
                "first stream-ordered call (the engine must import GPU memory: not the host one)");
  auto member = member_of(s, e);
  if (auto* bad = std::get_if<ValidationError>(&member)) throw Error(bad->code, bad->message);
  auto [comm, rank] = std::get<Member>(member);
  if (e.opcode == static_cast<uint32_t>(shm::Opcode::kBarrier))
    throw Error(ErrorCode::kInvalidArgument,
                "barrier cannot be captured into a CUDA graph: call it outside the capture");
  if ((e.flags & shm::kStreamOrdered) == 0)
    throw Error(ErrorCode::kInvalidArgument, "a graph collective must be stream-ordered");
  if (comm->layout)
    throw Error(ErrorCode::kUnavailable,
                "communicator '" + comm->key +
                    "' spans several nodes: its collectives cannot be captured into CUDA graphs "
                    "yet (call them outside the capture)");
  if (shm::is_point_to_point(e.opcode)) {
    auto side = pair_side(s, e, *comm, rank);
    if (auto* bad = std::get_if<ValidationError>(&side)) throw Error(bad->code, bad->message);
    auto& [end, request] = std::get<PairSide>(side);
    return {*comm, rank, std::move(request), end};
  }
  auto validated =
      validate_request(e, comm->nranks, rank, [&s](uint64_t id) { return s.buffer(id); });
  if (auto* bad = std::get_if<ValidationError>(&validated)) throw Error(bad->code, bad->message);
  return {*comm, rank, std::get<ValidatedRequest>(std::move(validated)), std::nullopt};
}

bool Arrivals::poll() {
  bool started = false;
  for (std::size_t i = 0; i < awaiting_stream_.size();) {
    AwaitingStream& a = awaiting_stream_[i];
    Session* session = sessions_.find(a.target.session_id);
    Communicator* comm = find_comm(a.comm_id);
    const bool gone = session == nullptr || comm == nullptr;
    if (!gone && !session->stream_ready(a.target.slot, a.target.generation)) {
      ++i;
      continue;
    }
    if (gone) {
      completer_.complete(a.target, ErrorCode::kPeerLost,
                          "the communicator or session ended meanwhile");
    } else {
      stats_.stream_ready_waits_total.fetch_add(1, std::memory_order_relaxed);
      stats_.stream_ready_wait_us_total.fetch_add(
          std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                                a.seen)
              .count(),
          std::memory_order_relaxed);
      scheduler_.arrive(*comm, a.rank, a.seq, a.target, std::move(a.request));
    }
    awaiting_stream_[i] = std::move(awaiting_stream_.back());
    awaiting_stream_.pop_back();
    started = true;
  }
  return started;
}

}  // namespace iris::daemon
