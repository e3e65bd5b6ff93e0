#include "daemon/runtime.hpp"

#include <fcntl.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include <spdlog/spdlog.h>

namespace iris::daemon {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

Runtime::Runtime(const Config& config, Engine& engine, Stats& stats, ProgressLoop& loop)
    : config_(config),
      engine_(engine),
      stats_(stats),
      loop_(loop),
      scheduler_(
          engine, stats, [this](const CompletionTarget& t, ErrorCode c) { complete(t, c); },
          config.limits.max_inflight),
      layout_(*shm::SegmentLayout::for_depth(config.limits.ring_depth)) {
  loop_.watch(engine_.completion_fd());
}

Runtime::~Runtime() {
  while (!sessions_.empty()) end_session(sessions_.begin()->first, false);
}

Session& Runtime::session(uint64_t id) const {
  auto it = sessions_.find(id);
  if (it == sessions_.end())
    throw Error(ErrorCode::kNotFound, "session " + std::to_string(id) + " is not attached");
  return *it->second;
}

std::string Runtime::session_shm_name(uint64_t session_id) const {
  return config_.shm_prefix() + "s" + std::to_string(session_id);
}

std::string Runtime::buffer_shm_name(uint64_t session_id, uint64_t buffer_id) const {
  return session_shm_name(session_id) + ".b" + std::to_string(buffer_id);
}

std::string Runtime::new_token() {
  static std::random_device entropy;  // getrandom(2) on Linux
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (int i = 0; i < 8; ++i) {
    uint32_t v = entropy();
    for (int j = 0; j < 8; ++j, v >>= 4) token.push_back(kHex[v & 0xf]);
  }
  return token;
}

AttachResult Runtime::attach(const net::PeerCredentials& peer, const std::string& client_name,
                             int connection) {
  if (sessions_.size() >= config_.limits.max_sessions)
    throw Error(ErrorCode::kLimitExceeded,
                "irisd already has " + std::to_string(sessions_.size()) +
                    " sessions (max_sessions); detach idle clients or raise --max-sessions");
  const uint64_t id = next_session_id_++;
  const std::string name = session_shm_name(id);
  shm::ShmSegment segment;
  try {
    segment = shm::ShmSegment::create(name, layout_.total_bytes, peer.uid);
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kInternal, e.what());
  }
  shm::initialize_segment(segment.data(), layout_, id);
  net::Fd wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake) throw Error(ErrorCode::kInternal, std::string("eventfd: ") + std::strerror(errno));
  net::Fd connection_dup(::fcntl(connection, F_DUPFD_CLOEXEC, 0));
  std::string token = new_token();
  auto s = std::make_unique<Session>(id, peer, client_name, token, std::move(segment), layout_,
                                     std::move(wake), std::move(connection_dup));
  AttachResult result{id, token, name, layout_.ring_depth, s->wake_fd()};
  loop_.watch(s->wake_fd());
  session_by_token_.emplace(token, id);
  session_list_.push_back(s.get());
  sessions_.emplace(id, std::move(s));
  stats_.sessions_attached_total.fetch_add(1, std::memory_order_relaxed);
  spdlog::info("session {} attached: pid {} uid {} gid {} '{}'", id, peer.pid, peer.uid, peer.gid,
               client_name);
  return result;
}

void Runtime::end_session(uint64_t session_id, bool lost) {
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return;
  Session& s = *it->second;
  if (lost) stats_.sessions_lost_total.fetch_add(1, std::memory_order_relaxed);
  spdlog::log(lost ? spdlog::level::warn : spdlog::level::info,
              "session {} (pid {}) {}: freeing {} buffers, leaving {} communicators", session_id,
              s.peer().pid, lost ? "lost its connection" : "detached", s.buffers.size(),
              s.comm_ranks.size());
  while (!s.comm_ranks.empty()) leave_comm(s, s.comm_ranks.begin()->first, ErrorCode::kPeerLost);
  for (auto& [id, buffer] : s.buffers) {
    if (buffer->device == kHostMemory) shm::ShmSegment::remove(buffer_shm_name(session_id, id));
    stats_.buffers_registered.fetch_sub(1, std::memory_order_relaxed);
    stats_.buffer_bytes_registered.fetch_sub(buffer->bytes, std::memory_order_relaxed);
  }
  loop_.unwatch(s.wake_fd());
  session_by_token_.erase(s.token());
  std::erase(session_list_, &s);
  sessions_.erase(it);
}

uint64_t Runtime::session_for_token(const std::string& token) const {
  auto it = session_by_token_.find(token);
  if (it == session_by_token_.end())
    throw Error(ErrorCode::kNotFound,
                "unknown session token: attach first (the session may have ended)");
  return it->second;
}

v1::RegisterBufferResponse Runtime::register_buffer(uint64_t session_id, uint64_t bytes) {
  Session& s = session(session_id);
  check_buffer_limits(s, bytes);
  const uint64_t id = next_buffer_id_++;
  const std::string name = buffer_shm_name(session_id, id);
  // Declared in this order so that the engine unpins before the segment is unmapped.
  struct HostMapping {
    shm::ShmSegment segment;
    std::shared_ptr<void> pin;
  };
  auto mapping = std::make_shared<HostMapping>();
  try {
    mapping->segment = shm::ShmSegment::create(name, bytes, s.peer().uid);
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kLimitExceeded, e.what());
  }
  auto* base = static_cast<std::byte*>(mapping->segment.data());
  try {
    mapping->pin = engine_.prepare_host_memory(base, bytes);
  } catch (...) {
    shm::ShmSegment::remove(name);
    throw;
  }
  add_buffer(s, std::make_shared<MappedBuffer>(
                    MappedBuffer{id, session_id, base, bytes, mapping, kHostMemory}));
  v1::RegisterBufferResponse out;
  out.set_buffer_id(id);
  out.set_shm_name(name);
  out.set_bytes(bytes);
  return out;
}

v1::RegisterBufferResponse Runtime::register_device_buffer(uint64_t session_id,
                                                           const DeviceBufferExport& exported) {
  Session& s = session(session_id);
  check_buffer_limits(s, exported.bytes);
  ImportedMemory imported = engine_.import_device_memory(exported);
  const uint64_t id = next_buffer_id_++;
  add_buffer(
      s, std::make_shared<MappedBuffer>(MappedBuffer{id, session_id, imported.base, imported.bytes,
                                                     imported.keepalive, imported.device}));
  v1::RegisterBufferResponse out;
  out.set_buffer_id(id);
  out.set_bytes(imported.bytes);
  return out;
}

void Runtime::register_device_done_flags(uint64_t session_id, const DeviceBufferExport& exported) {
  Session& s = session(session_id);
  if (exported.bytes < uint64_t{s.ring_depth()} * sizeof(uint32_t))
    throw Error(ErrorCode::kInvalidArgument,
                "stream done flags need " + std::to_string(s.ring_depth() * sizeof(uint32_t)) +
                    " bytes (ring depth x 4), got " + std::to_string(exported.bytes));
  if (s.device_done_flags)
    throw Error(ErrorCode::kAlreadyExists, "this session already registered its done flags");
  s.device_done_flags = engine_.import_device_memory(exported);
}

void Runtime::check_buffer_limits(const Session& s, uint64_t bytes) const {
  if (bytes == 0) throw Error(ErrorCode::kInvalidArgument, "buffer size must be at least 1 byte");
  if (bytes > config_.limits.max_buffer_bytes)
    throw Error(ErrorCode::kLimitExceeded,
                "buffer of " + std::to_string(bytes) + " bytes exceeds max_buffer_bytes (" +
                    std::to_string(config_.limits.max_buffer_bytes) + ")");
  if (s.buffers.size() >= config_.limits.max_buffers_per_session)
    throw Error(ErrorCode::kLimitExceeded,
                "session already has " + std::to_string(s.buffers.size()) +
                    " buffers (max_buffers); free some or raise --max-buffers");
}

void Runtime::add_buffer(Session& s, std::shared_ptr<MappedBuffer> buffer) {
  s.buffer_bytes += buffer->bytes;
  stats_.buffers_registered.fetch_add(1, std::memory_order_relaxed);
  stats_.buffer_bytes_registered.fetch_add(buffer->bytes, std::memory_order_relaxed);
  const uint64_t id = buffer->id;
  s.buffers.emplace(id, std::move(buffer));
}

void Runtime::deregister_buffer(uint64_t session_id, uint64_t buffer_id) {
  Session& s = session(session_id);
  auto it = s.buffers.find(buffer_id);
  if (it == s.buffers.end())
    throw Error(ErrorCode::kNotFound,
                "buffer " + std::to_string(buffer_id) + " is not registered by this session");
  // Copies in flight keep the mapping or import (shared_ptr); a host buffer's name goes now.
  if (it->second->device == kHostMemory)
    shm::ShmSegment::remove(buffer_shm_name(session_id, buffer_id));
  s.buffer_bytes -= it->second->bytes;
  stats_.buffers_registered.fetch_sub(1, std::memory_order_relaxed);
  stats_.buffer_bytes_registered.fetch_sub(it->second->bytes, std::memory_order_relaxed);
  s.buffers.erase(it);
}

uint64_t Runtime::comm_init(uint64_t session_id, const std::string& key, uint32_t nranks,
                            uint32_t rank) {
  Session& s = session(session_id);
  if (key.empty() || key.size() > 256)
    throw Error(ErrorCode::kInvalidArgument, "communicator key must be 1 to 256 bytes");
  if (nranks == 0 || nranks > kMaxRanks)
    throw Error(ErrorCode::kInvalidArgument, "nranks must be 1 to " + std::to_string(kMaxRanks) +
                                                 ", got " + std::to_string(nranks));
  if (rank >= nranks)
    throw Error(
        ErrorCode::kInvalidArgument,
        "rank " + std::to_string(rank) + " is out of range for nranks " + std::to_string(nranks));
  Communicator* comm = nullptr;
  if (auto it = comm_by_key_.find(key); it != comm_by_key_.end()) {
    comm = comms_.at(it->second).get();
    if (comm->nranks != nranks)
      throw Error(ErrorCode::kNranksMismatch, "communicator '" + key + "' has nranks " +
                                                  std::to_string(comm->nranks) +
                                                  ", this rank passed " + std::to_string(nranks));
    if (comm->uid != s.peer().uid && !config_.allow_cross_uid_comms)
      throw Error(ErrorCode::kPermissionDenied,
                  "communicator '" + key + "' belongs to uid " + std::to_string(comm->uid) +
                      "; irisd is configured to keep users apart (allow_cross_uid_comms)");
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
    created->id = next_comm_id_++;
    created->key = key;
    created->nranks = nranks;
    created->uid = s.peer().uid;
    created->members.resize(nranks);
    created->next_seq.assign(nranks, 1);
    comm = created.get();
    comm_by_key_.emplace(key, comm->id);
    comms_.emplace(comm->id, std::move(created));
  }
  comm->members[rank] = session_id;
  s.comm_ranks.emplace(comm->id, rank);
  spdlog::info("session {} joined communicator '{}' (id {}) as rank {}/{}", session_id, key,
               comm->id, rank, nranks);
  return comm->id;
}

void Runtime::comm_destroy(uint64_t session_id, uint64_t comm_id) {
  Session& s = session(session_id);
  if (s.comm_ranks.count(comm_id) == 0)
    throw Error(ErrorCode::kNotFound,
                "this session holds no rank in communicator " + std::to_string(comm_id));
  leave_comm(s, comm_id, ErrorCode::kPeerLost);
}

void Runtime::leave_comm(Session& s, uint64_t comm_id, ErrorCode reason_for_others) {
  auto rank_it = s.comm_ranks.find(comm_id);
  Communicator& comm = *comms_.at(comm_id);
  comm.members[rank_it->second].reset();
  s.comm_ranks.erase(rank_it);
  // Whoever stays can never complete another collective: fail what waits and what comes.
  if (comm.joined() > 0) scheduler_.break_comm(comm, reason_for_others);
  if (auto k = comm_by_key_.find(comm.key); k != comm_by_key_.end() && k->second == comm_id)
    comm_by_key_.erase(k);  // the key is free for a new communicator
  remove_comm_if_unused(comm_id);
}

void Runtime::remove_comm_if_unused(uint64_t comm_id) {
  auto it = comms_.find(comm_id);
  if (it == comms_.end()) return;
  Communicator& comm = *it->second;
  if (comm.joined() != 0) return;
  // Copies still in flight reference the communicator: it goes once they have finished.
  for (auto& [seq, c] : comm.in_flight) {
    if (c->total_in_flight != 0) {
      if (std::find(emptied_comms_.begin(), emptied_comms_.end(), comm_id) == emptied_comms_.end())
        emptied_comms_.push_back(comm_id);
      return;
    }
  }
  scheduler_.break_comm(comm, ErrorCode::kPeerLost);
  if (comm.in_flight.empty()) comms_.erase(it);
}

void Runtime::complete(const CompletionTarget& target, ErrorCode code) {
  auto it = sessions_.find(target.session_id);
  if (it == sessions_.end()) return;  // the rank's session is gone
  Session& s = *it->second;
  s.complete(target.slot, target.generation, code);
  if (s.device_done_flags)
    engine_.write_device_word(s.device_done_flags->device,
                              s.device_done_flags->base + target.slot * sizeof(uint32_t),
                              target.generation);
}

void Runtime::handle_entry(Session& s, const shm::SubmitEntry& e) {
  ++s.submitted;
  stats_.ring_entries_total.fetch_add(1, std::memory_order_relaxed);
  if (e.slot >= s.ring_depth()) {
    // Nowhere to report it: the client library never does this.
    spdlog::warn("session {}: ring entry names completion slot {} (ring depth {}); dropped", s.id(),
                 e.slot, s.ring_depth());
    stats_.count_error(ErrorCode::kInvalidArgument);
    return;
  }
  const CompletionTarget target{s.id(), e.slot, e.generation};
  if (e.opcode == static_cast<uint32_t>(shm::Opcode::kNop)) return complete(target, ErrorCode::kOk);
  handle_collective(s, e);
}

void Runtime::handle_collective(Session& s, const shm::SubmitEntry& e) {
  const CompletionTarget target{s.id(), e.slot, e.generation};
  auto reject = [&](ErrorCode code, const std::string& why) {
    spdlog::warn("session {}: request rejected: {}", s.id(), why);
    stats_.count_error(code);
    complete(target, code);
  };
  if (e.opcode < shm::kFirstCollectiveOpcode || e.opcode > shm::kLastCollectiveOpcode)
    return reject(ErrorCode::kInvalidArgument,
                  "unknown opcode " + std::to_string(e.opcode) + " in ring entry");
  auto rank_it = s.comm_ranks.find(e.comm_id);
  if (rank_it == s.comm_ranks.end())
    return reject(ErrorCode::kNotFound,
                  "communicator " + std::to_string(e.comm_id) + " unknown to this session");
  Communicator& comm = *comms_.at(e.comm_id);
  const uint32_t rank = rank_it->second;
  const uint64_t expected = comm.next_seq[rank];
  if (e.seq != expected)
    return reject(ErrorCode::kSequenceError,
                  "comm '" + comm.key + "' rank " + std::to_string(rank) + " submitted seq " +
                      std::to_string(e.seq) + ", expected " + std::to_string(expected) +
                      (e.seq < expected ? " (reused)" : " (skipped)"));
  comm.next_seq[rank] = expected + 1;

  auto lookup = [&s](uint64_t id) -> std::shared_ptr<MappedBuffer> {
    auto it = s.buffers.find(id);
    return it == s.buffers.end() ? nullptr : it->second;
  };
  auto validated = validate_request(e, comm.nranks, rank, lookup);
  if (auto* bad = std::get_if<ValidationError>(&validated)) {
    spdlog::warn("session {}: comm '{}' seq {} rank {}: {}; failing the collective on every rank",
                 s.id(), comm.key, e.seq, rank, bad->message);
    scheduler_.arrive(comm, rank, e.seq, target, std::nullopt, bad->code);
    return;
  }
  auto request = std::get<ValidatedRequest>(std::move(validated));
  if (request.stream_ordered && !s.device_done_flags) {
    // Nothing the caller's stream waits on could be written (libiris registers the flags
    // before its first stream-ordered request; the host engine cannot import them at all).
    spdlog::warn("session {}: stream-ordered request without registered done flags; failing it",
                 s.id());
    scheduler_.arrive(comm, rank, e.seq, target, std::nullopt, ErrorCode::kInvalidArgument);
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
  scheduler_.arrive(comm, rank, e.seq, target, std::move(request), ErrorCode::kOk);
}

bool Runtime::start_ready_stream_arrivals() {
  bool started = false;
  for (std::size_t i = 0; i < awaiting_stream_.size();) {
    AwaitingStream& a = awaiting_stream_[i];
    auto session_it = sessions_.find(a.target.session_id);
    auto comm_it = comms_.find(a.comm_id);
    const bool gone = session_it == sessions_.end() || comm_it == comms_.end();
    if (!gone && !session_it->second->stream_ready(a.target.slot, a.target.generation)) {
      ++i;
      continue;
    }
    if (gone) {
      complete(a.target, ErrorCode::kPeerLost);
    } else {
      stats_.stream_ready_waits_total.fetch_add(1, std::memory_order_relaxed);
      stats_.stream_ready_wait_us_total.fetch_add(
          std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                                a.seen)
              .count(),
          std::memory_order_relaxed);
      scheduler_.arrive(*comm_it->second, a.rank, a.seq, a.target, std::move(a.request),
                        ErrorCode::kOk);
    }
    awaiting_stream_[i] = std::move(awaiting_stream_.back());
    awaiting_stream_.pop_back();
    started = true;
  }
  return started;
}

bool Runtime::poll_once() {
  bool worked = false;
  for (Session* s : session_list_) {
    shm::SubmitEntry entry;
    for (uint32_t n = 0; n < s->ring_depth(); ++n) {
      const auto r = s->ring().try_pop(entry);
      if (r == shm::PopResult::kEmpty) break;
      if (r == shm::PopResult::kCorrupt) {
        spdlog::error("session {} (pid {}): ring indices corrupt; ending the session", s->id(),
                      s->peer().pid);
        sessions_to_end_.push_back(s->id());
        break;
      }
      handle_entry(*s, entry);
      worked = true;
    }
  }
  if (!awaiting_stream_.empty() && start_ready_stream_arrivals()) worked = true;
  completions_.clear();
  if (engine_.poll(completions_) > 0) {
    worked = true;
    for (const CopyCompletion& c : completions_) scheduler_.on_copy_complete(c);
  }
  for (Session* s : session_list_) s->flush_wake();
  if (!sessions_to_end_.empty()) {
    auto ending = std::move(sessions_to_end_);
    sessions_to_end_.clear();
    for (uint64_t id : ending) end_session(id, true);
  }
  // Communicators whose last member left while copies were in flight.
  if (worked && !emptied_comms_.empty()) {
    auto emptied = std::move(emptied_comms_);
    emptied_comms_.clear();
    for (uint64_t id : emptied) remove_comm_if_unused(id);
  }
  return worked;
}

void Runtime::set_sleeping(bool sleeping) {
  for (Session* s : session_list_) s->set_daemon_needs_wakeup(sleeping);
}

bool Runtime::has_ready_work() {
  // Work no fd announces: copies the engine must poll for, GPU streams' ready flags.
  if (engine_.needs_polling() || !awaiting_stream_.empty()) return true;
  for (Session* s : session_list_)
    if (s->ring_has_entries()) return true;
  return false;
}

void Runtime::mark_all_stopped() {
  for (Session* s : session_list_) s->mark_daemon_stopped();
}

void Runtime::fill_sessions(v1::ListSessionsResponse& out) const {
  for (const Session* s : session_list_) {
    auto* info = out.add_sessions();
    info->set_session_id(s->id());
    info->set_pid(static_cast<uint32_t>(s->peer().pid));
    info->set_uid(s->peer().uid);
    info->set_gid(s->peer().gid);
    info->set_client_name(s->client_name());
    info->set_buffers(static_cast<uint32_t>(s->buffers.size()));
    info->set_buffer_bytes(s->buffer_bytes);
    info->set_communicators(static_cast<uint32_t>(s->comm_ranks.size()));
    info->set_submitted(s->submitted);
    info->set_attached_seconds(seconds_since(s->attached_at()));
  }
}

void Runtime::fill_comms(v1::ListCommsResponse& out) const {
  for (const auto& [id, comm] : comms_) {
    auto* info = out.add_comms();
    info->set_comm_id(id);
    info->set_key(comm->key);
    info->set_nranks(comm->nranks);
    info->set_uid(comm->uid);
    info->set_broken(comm->broken);
    info->set_completed(comm->completed);
    for (uint32_t r = 0; r < comm->nranks; ++r)
      if (comm->members[r]) info->add_joined_ranks(r);
    for (const auto& [seq, c] : comm->in_flight) {
      auto* f = info->add_in_flight();
      f->set_seq(seq);
      if (const RankArgs* reference = c->reference()) {
        f->set_bytes(reference->bytes);
        f->set_collective(std::string(collective_name(reference->kind)));
      }
      for (uint32_t r = 0; r < comm->nranks; ++r) {
        if (c->arrivals[r]) {
          f->add_arrived_ranks(r);
        } else {
          f->add_waiting_on_ranks(r);
        }
      }
    }
  }
}

}  // namespace iris::daemon
