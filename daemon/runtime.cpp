#include "daemon/runtime.hpp"

#include <fcntl.h>

#include <spdlog/spdlog.h>

namespace iris::daemon {

Runtime::Runtime(const Config& config, Engine& engine, Stats& stats, ProgressLoop& loop)
    : engine_(engine),
      stats_(stats),
      loop_(loop),
      tenant_log_(stats.log_lines_suppressed_total),
      scheduler_(
          engine, stats, tenant_log_,
          [this](const CompletionTarget& t, ErrorCode c, const std::string& why) {
            complete(t, c, why);
          },
          config.limits.max_inflight),
      sessions_(config),
      buffers_(config, engine, stats, sessions_),
      comms_(config, scheduler_),
      plans_(scheduler_, stats, std::chrono::milliseconds(config.limits.graph_replay_timeout_ms),
             config.limits.max_graph_plans_per_uid),
      scale_out_(config, scheduler_, comms_, engine, loop) {
  loop_.watch(engine_.completion_fd());
}

Runtime::~Runtime() {
  while (!sessions_.empty()) end_session(sessions_.list().front()->id(), false);
}

AttachResult Runtime::attach(const net::PeerCredentials& peer, const std::string& client_name,
                             int connection) {
  Session& s = sessions_.create(peer, client_name, connection);
  loop_.watch(s.wake_fd());
  stats_.sessions_attached_total.fetch_add(1, std::memory_order_relaxed);
  stats_.sessions.store(sessions_.size(), std::memory_order_relaxed);
  tenant_log_.log(spdlog::level::info, peer.uid, TenantLogKind::kAttach,
                  "session {} attached: pid {} uid {} gid {} '{}'", s.id(), peer.pid, peer.uid,
                  peer.gid, client_name);
  return {s.id(), s.ring_depth(), net::Fd(::fcntl(s.wake_fd(), F_DUPFD_CLOEXEC, 0)),
          s.take_segment_fd()};
}

void Runtime::end_session(uint64_t session_id, bool lost) {
  Session* s = sessions_.find(session_id);
  if (s == nullptr) return;
  if (lost) stats_.sessions_lost_total.fetch_add(1, std::memory_order_relaxed);
  tenant_log_.log(lost ? spdlog::level::warn : spdlog::level::info, s->peer().uid,
                  TenantLogKind::kAttach,
                  "session {} (pid {}) {}: freeing {} buffers, leaving {} communicators",
                  session_id, s->peer().pid, lost ? "lost its connection" : "detached",
                  s->buffers.size(), s->comm_ranks.size());
  const std::string how = lost ? "died or closed its connection" : "detached";
  while (!s->comm_ranks.empty()) {
    const uint64_t comm_id = s->comm_ranks.begin()->first;
    plans_.release_comm(*s, comm_id, how);
    comms_.leave(*s, comm_id, how);
  }
  buffers_.release_all(*s);
  loop_.unwatch(s->wake_fd());
  sessions_.remove(session_id);
  stats_.sessions.store(sessions_.size(), std::memory_order_relaxed);
  count_comms();
}

void Runtime::count_comms() {
  stats_.communicators.store(comms_.size(), std::memory_order_relaxed);
}

RegisteredBuffer Runtime::register_buffer(uint64_t session_id, uint64_t bytes) {
  return buffers_.register_host(sessions_.get(session_id), bytes);
}

RegisteredBuffer Runtime::register_device_buffer(uint64_t session_id,
                                                 const DeviceBufferExport& exported) {
  return buffers_.register_device(sessions_.get(session_id), exported);
}

void Runtime::register_device_done_flags(uint64_t session_id, const DeviceBufferExport& exported) {
  buffers_.register_done_flags(sessions_.get(session_id), exported);
}

void Runtime::deregister_buffer(uint64_t session_id, uint64_t buffer_id) {
  buffers_.deregister(sessions_.get(session_id), buffer_id);
}

uint64_t Runtime::comm_init(uint64_t session_id, const std::string& key, uint32_t nranks,
                            uint32_t rank, std::optional<NodesOfComm> nodes) {
  Session& s = sessions_.get(session_id);
  std::shared_ptr<const NodeLayout> layout;
  if (nodes) {
    layout = scale_out_.check_layout(std::move(nodes->addresses), std::move(nodes->node_of_rank),
                                     std::move(nodes->secret), nranks, rank);
  }
  const uint64_t id = comms_.join(s, key, nranks, rank, layout);
  if (layout) {
    try {
      scale_out_.joined(*comms_.find(id));
    } catch (const Error&) {
      // Its nodes cannot be reached: the rank does not stay in a communicator it cannot use.
      comms_.leave(s, id, "could not connect to the communicator's other nodes");
      count_comms();
      throw;
    }
  }
  count_comms();
  return id;
}

std::string Runtime::node_address() { return scale_out_.address(); }

std::pair<uint32_t, uint32_t> Runtime::comm_nodes_joined(uint64_t session_id, uint64_t comm_id) {
  Session& s = sessions_.get(session_id);
  if (s.comm_ranks.count(comm_id) == 0)
    throw Error(ErrorCode::kNotFound,
                "this session holds no rank in communicator " + std::to_string(comm_id));
  const Communicator& comm = *comms_.find(comm_id);
  if (!comm.layout) return {1, 1};
  if (comm.broken) throw Error(comm.broken_code, comm.broken_why);  // a node died meanwhile
  return scale_out_.nodes_joined(comm);
}

void Runtime::comm_destroy(uint64_t session_id, uint64_t comm_id) {
  Session& s = sessions_.get(session_id);
  const std::string how = "left (destroyed its communicator)";
  if (s.comm_ranks.count(comm_id) != 0) plans_.release_comm(s, comm_id, how);
  comms_.leave(s, comm_id, how);
  count_comms();
}

void Runtime::register_graph_plan(uint64_t session_id, const shm::SubmitEntry& entry,
                                  uint32_t plan_slot) {
  Session& s = sessions_.get(session_id);
  if (!s.device_done_flags)
    throw Error(ErrorCode::kInvalidArgument,
                "a graph collective needs the session's GPU done flags, registered with its "
                "first stream-ordered call (the engine must import GPU memory: not the host one)");
  auto rank_it = s.comm_ranks.find(entry.comm_id);
  if (rank_it == s.comm_ranks.end())
    throw Error(ErrorCode::kNotFound,
                "communicator " + std::to_string(entry.comm_id) + " unknown to this session");
  if (entry.opcode < shm::kFirstCollectiveOpcode || entry.opcode > shm::kLastCollectiveOpcode ||
      entry.opcode == static_cast<uint32_t>(shm::Opcode::kBarrier))
    throw Error(ErrorCode::kInvalidArgument,
                "opcode " + std::to_string(entry.opcode) + " cannot be captured into a graph");
  if ((entry.flags & shm::kStreamOrdered) == 0)
    throw Error(ErrorCode::kInvalidArgument, "a graph collective must be stream-ordered");
  const Communicator& comm = *comms_.find(entry.comm_id);
  if (comm.layout)
    throw Error(ErrorCode::kUnavailable,
                "communicator '" + comm.key +
                    "' spans several nodes: its collectives cannot be captured into CUDA graphs "
                    "yet (call them outside the capture)");
  auto lookup = [&s](uint64_t id) { return s.buffer(id); };
  auto validated = validate_request(entry, comm.nranks, rank_it->second, lookup);
  if (auto* bad = std::get_if<ValidationError>(&validated)) throw Error(bad->code, bad->message);
  plans_.add(s, plan_slot, comm, rank_it->second, std::get<ValidatedRequest>(std::move(validated)));
}

void Runtime::release_graph_plan(uint64_t session_id, uint32_t plan_slot) {
  plans_.release(sessions_.get(session_id), plan_slot);
}

void Runtime::complete(const CompletionTarget& target, ErrorCode code, std::string why) {
  Session* s = sessions_.find(target.session_id);
  if (s == nullptr) return;  // the rank's session is gone
  if (s->device_done_flags) {
    // The caller's stream waits for this flag: a write that cannot be issued is the request's
    // error, never a success the stream would wait on for ever.
    try {
      engine_.write_device_word(s->device_done_flags->device,
                                s->device_done_flags->base + target.slot * sizeof(uint32_t),
                                target.graph_plan ? 1u : target.generation);
    } catch (const Error& e) {
      tenant_log_.log(spdlog::level::err, s->peer().uid, TenantLogKind::kSession,
                      "session {} (pid {}): stream done flag of slot {} not written: {}", s->id(),
                      s->peer().pid, target.slot, e.message());
      stats_.count_error(ErrorCode::kEngineError);
      if (code == ErrorCode::kOk) {
        code = ErrorCode::kEngineError;
        why = "irisd could not write the stream's done flag: " + e.message();
      }
    }
  }
  s->complete(target.slot, target.generation, code, why);
  if (!target.graph_plan) --s->pending;
}

template <typename... Args>
void Runtime::session_warn(Session& s, fmt::format_string<Args...> format, Args&&... args) {
  tenant_log_.warn(s.peer().uid, TenantLogKind::kSession, "session {} (pid {}): {}", s.id(),
                   s.peer().pid, fmt::format(format, std::forward<Args>(args)...));
}

void Runtime::handle_entry(Session& s, const shm::SubmitEntry& e) {
  ++s.submitted;
  stats_.ring_entries_total.fetch_add(1, std::memory_order_relaxed);
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
    return complete(target, ErrorCode::kLimitExceeded,
                    "more requests in flight than this session has completion slots");
  }
  if (e.opcode == static_cast<uint32_t>(shm::Opcode::kNop)) return complete(target, ErrorCode::kOk);
  handle_collective(s, e);
}

void Runtime::handle_collective(Session& s, const shm::SubmitEntry& e) {
  const CompletionTarget target{s.id(), e.slot, e.generation};
  auto reject = [&](ErrorCode code, const std::string& why) {
    session_warn(s, "request rejected: {}", why);
    stats_.count_error(code);
    complete(target, code, why);
  };
  if (e.opcode < shm::kFirstCollectiveOpcode || e.opcode > shm::kLastCollectiveOpcode)
    return reject(ErrorCode::kInvalidArgument,
                  "unknown opcode " + std::to_string(e.opcode) + " in ring entry");
  auto rank_it = s.comm_ranks.find(e.comm_id);
  if (rank_it == s.comm_ranks.end())
    return reject(ErrorCode::kNotFound,
                  "communicator " + std::to_string(e.comm_id) + " unknown to this session");
  Communicator& comm = *comms_.find(e.comm_id);
  const uint32_t rank = rank_it->second;
  const uint64_t expected = comm.next_seq[rank];
  if (e.seq != expected)
    return reject(ErrorCode::kSequenceError,
                  "comm '" + comm.key + "' rank " + std::to_string(rank) + " submitted seq " +
                      std::to_string(e.seq) + ", expected " + std::to_string(expected) +
                      (e.seq < expected ? " (reused)" : " (skipped)"));
  comm.next_seq[rank] = expected + 1;

  auto lookup = [&s](uint64_t id) { return s.buffer(id); };
  auto validated = validate_request(e, comm.nranks, rank, lookup);
  if (auto* bad = std::get_if<ValidationError>(&validated)) {
    session_warn(s, "comm '{}' seq {} rank {}: {}; failing the collective on every rank", comm.key,
                 e.seq, rank, bad->message);
    scheduler_.arrive(comm, rank, e.seq, target, std::nullopt, bad->code, bad->message);
    return;
  }
  auto request = std::get<ValidatedRequest>(std::move(validated));
  if (request.stream_ordered && !s.device_done_flags) {
    // Nothing the caller's stream waits on could be written (libiris registers the flags
    // before its first stream-ordered request; the host engine cannot import them at all).
    session_warn(s, "stream-ordered request without registered done flags; failing it");
    scheduler_.arrive(comm, rank, e.seq, target, std::nullopt, ErrorCode::kInvalidArgument,
                      "stream-ordered, but this session registered no done flags (the engine "
                      "cannot write GPU memory?)");
    return;
  }
  if (request.stream_ordered && !s.stream_ready(e.slot, e.generation)) {
    // Polled, not waited for on the GPU: a daemon stream blocked on one rank's flag would hold
    // up every later copy on that stream, other collectives' included.
    awaiting_stream_.push_back(
        {target, e.comm_id, rank, e.seq, std::move(request), std::chrono::steady_clock::now()});
    return;
  }
  if (request.stream_ordered)
    stats_.stream_ready_waits_total.fetch_add(1, std::memory_order_relaxed);
  scheduler_.arrive(comm, rank, e.seq, target, std::move(request));
}

bool Runtime::start_ready_stream_arrivals() {
  bool started = false;
  for (std::size_t i = 0; i < awaiting_stream_.size();) {
    AwaitingStream& a = awaiting_stream_[i];
    Session* session = sessions_.find(a.target.session_id);
    Communicator* comm = comms_.find(a.comm_id);
    const bool gone = session == nullptr || comm == nullptr;
    if (!gone && !session->stream_ready(a.target.slot, a.target.generation)) {
      ++i;
      continue;
    }
    if (gone) {
      complete(a.target, ErrorCode::kPeerLost, "the communicator or session ended meanwhile");
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

bool Runtime::poll_once() {
  bool worked = false;
  for (Session* s : sessions_.list()) {
    shm::SubmitEntry entry;
    for (uint32_t n = 0; n < s->ring_depth(); ++n) {
      const auto r = s->ring().try_pop(entry);
      if (r == shm::PopResult::kEmpty) break;
      if (r == shm::PopResult::kCorrupt) {
        tenant_log_.log(spdlog::level::err, s->peer().uid, TenantLogKind::kSession,
                        "session {} (pid {}): ring indices corrupt; ending the session", s->id(),
                        s->peer().pid);
        sessions_to_end_.push_back(s->id());
        break;
      }
      handle_entry(*s, entry);
      worked = true;
    }
    if (s->ring().take_found_full()) stats_.ring_full_total.fetch_add(1, std::memory_order_relaxed);
  }
  if (!awaiting_stream_.empty() && start_ready_stream_arrivals()) worked = true;
  if (!plans_.idle() && plans_.poll()) worked = true;
  if (scale_out_.progress()) worked = true;
  completions_.clear();
  if (engine_.poll(completions_) > 0) {
    worked = true;
    for (const CopyCompletion& c : completions_) scheduler_.on_copy_complete(c);
  }
  for (Session* s : sessions_.list()) s->flush_wake();
  if (!sessions_to_end_.empty()) {
    auto ending = std::move(sessions_to_end_);
    sessions_to_end_.clear();
    for (uint64_t id : ending) end_session(id, true);
  }
  // Communicators whose last member left while copies were in flight.
  if (worked) {
    comms_.remove_emptied();
    count_comms();
  }
  return worked;
}

void Runtime::set_sleeping(bool sleeping) {
  for (Session* s : sessions_.list()) s->set_daemon_needs_wakeup(sleeping);
}

bool Runtime::has_ready_work() {
  // Work no fd announces: copies the engine must poll for, GPU streams' ready flags.
  // Armed graph plans too: a replay announces itself only by writing its ready flag.
  if (engine_.needs_polling() || !awaiting_stream_.empty() || !plans_.idle()) return true;
  if (!scale_out_.ready_to_sleep()) return true;  // UCX events pending: progress first
  for (Session* s : sessions_.list())
    if (s->ring_has_entries()) return true;
  return false;
}

void Runtime::mark_all_stopped() {
  for (Session* s : sessions_.list()) s->mark_daemon_stopped();
}

}  // namespace iris::daemon
