#include "daemon/runtime.hpp"

#include <fcntl.h>

#include <spdlog/spdlog.h>

#include "daemon/operations/printable.hpp"
#include "daemon/sessions/peer_group.hpp"

namespace iris::daemon {

namespace {
// The most a client's own "held" figure is shown as (a day): its word, not a measurement.
constexpr uint64_t kMaxClientHeldMs = 86'400'000;
}  // namespace

Runtime::Runtime(const Config& config, Engine& engine, Stats& stats, ProgressLoop& loop)
    : meeting_address_(config.meeting_address),
      engine_(engine),
      stats_(stats),
      loop_(loop),
      tenant_log_(stats.log_lines_suppressed_total),
      sessions_(config),
      completer_(sessions_, engine, stats, tenant_log_),
      copies_(engine, stats, config.pacing),
      scheduler_(
          copies_, stats, tenant_log_,
          [this](const CompletionTarget& t, ErrorCode c, const std::string& why) {
            if (t.graph_plan)
              if (const Session* s = sessions_.find(t.session_id))
                plans_.replay_done(t.session_id, t.slot - s->ring_depth());
            completer_.complete(t, c, why);
          },
          config.limits.max_inflight),
      buffers_(config, engine, stats, sessions_),
      comms_(config, scheduler_, stats, tenant_log_),
      plans_(scheduler_, stats, tenant_log_,
             std::chrono::milliseconds(config.limits.graph_replay_timeout_ms),
             config.limits.max_graph_plans_per_uid),
      scale_out_(config, scheduler_, tenant_log_, comms_, copies_, loop),
      p2p_(comms_, scheduler_, completer_, stats,
           std::chrono::milliseconds(config.limits.p2p_timeout_ms)),
      watchdog_(comms_, scheduler_),
      arrivals_(sessions_, comms_, scheduler_, p2p_, completer_, stats, tenant_log_),
      rings_(sessions_, arrivals_, stats, tenant_log_,
             [this](uint64_t session_id) { end_session(session_id, true); }) {
  loop_.watch(engine_.completion_fd());
  for (const auto& [uid, weight] : config.uid_weights) copies_.set_weight(uid, weight);
  // A ring entry's path, in order; the completer wakes clients after everything that completes.
  for (Poller* p :
       std::initializer_list<Poller*>{&rings_, &arrivals_, &plans_, &scale_out_, &copies_, &p2p_,
                                      &completer_, &comms_, &watchdog_})
    loop_.add_poller(*p);
}

Runtime::~Runtime() {
  while (!sessions_.empty()) end_session(sessions_.list().front()->id(), false);
}

AttachResult Runtime::attach(const net::PeerCredentials& peer, const std::string& client_name,
                             int connection, std::optional<Resume> resume) {
  Session& s = sessions_.create(peer, client_name, connection,
                                resume ? std::move(resume->segment) : net::Fd());
  copies_.set_users(sessions_.users());
  loop_.watch(s.wake_fd());
  stats_.sessions_attached_total.fetch_add(1, std::memory_order_relaxed);
  stats_.sessions.store(sessions_.size(), std::memory_order_relaxed);
  if (resume) {
    s.next_buffer_id = std::max<uint64_t>(1, resume->next_buffer_id);
    stats_.sessions_resumed_total.fetch_add(1, std::memory_order_relaxed);
    // What irisd measures itself; the client's own figure is only shown, clamped and labelled.
    const auto after_start = std::chrono::duration_cast<std::chrono::microseconds>(
                                 std::chrono::steady_clock::now() - started_at_)
                                 .count();
    stats_.resume_after_start_us_total.fetch_add(static_cast<uint64_t>(after_start),
                                                 std::memory_order_relaxed);
    tenant_log_.log(spdlog::level::info, peer.uid, TenantLogKind::kAttach,
                    "session {} resumed session {} of the previous irisd ({}): pid {} uid {} gid "
                    "{} '{}', {} ms after this irisd started (the client says it waited {} ms)",
                    s.id(), resume->previous_session_id, resume->previous_version, peer.pid,
                    peer.uid, peer.gid, client_name, after_start / 1000,
                    std::min<uint64_t>(resume->held_ms, kMaxClientHeldMs));
  } else {
    tenant_log_.log(spdlog::level::info, peer.uid, TenantLogKind::kAttach,
                    "session {} attached: pid {} uid {} gid {} '{}'", s.id(), peer.pid, peer.uid,
                    peer.gid, client_name);
  }
  return {s.id(), s.ring_depth(), net::Fd(::fcntl(s.wake_fd(), F_DUPFD_CLOEXEC, 0)),
          s.take_segment_fd()};
}

void Runtime::start_serving(uint64_t session_id) {
  if (Session* s = sessions_.find(session_id)) s->start_serving();
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
  s->mark_session_ended();  // unless irisd is stopping: then its client resumes it
  const std::string how = lost ? "died or closed its connection" : "detached";
  while (!s->comm_ranks.empty()) leave_comm(*s, s->comm_ranks.begin()->first, how);
  buffers_.release_all(*s);
  loop_.unwatch(s->wake_fd());
  sessions_.remove(session_id);
  copies_.set_users(sessions_.users());
  stats_.sessions.store(sessions_.size(), std::memory_order_relaxed);
}

RegisteredBuffer Runtime::register_buffer(uint64_t session_id, uint64_t bytes) {
  return buffers_.register_host(sessions_.get(session_id), bytes);
}

RegisteredBuffer Runtime::register_device_buffer(uint64_t session_id,
                                                 const DeviceBufferExport& exported,
                                                 uint64_t resume_id) {
  return buffers_.register_device(sessions_.get(session_id), exported, resume_id);
}

void Runtime::adopt_host_buffer(uint64_t session_id, uint64_t buffer_id, uint64_t bytes,
                                net::Fd memfd) {
  buffers_.adopt_host(sessions_.get(session_id), buffer_id, bytes, std::move(memfd));
}

RegisteredBuffer Runtime::share_host_buffer(uint64_t session_id, uint64_t bytes, net::Fd memfd) {
  return buffers_.share_host(sessions_.get(session_id), bytes, std::move(memfd));
}

void Runtime::register_device_done_flags(uint64_t session_id, const DeviceBufferExport& exported) {
  buffers_.register_done_flags(sessions_.get(session_id), exported);
}

void Runtime::deregister_buffer(uint64_t session_id, uint64_t buffer_id) {
  buffers_.deregister(sessions_.get(session_id), buffer_id);
}

uint64_t Runtime::comm_init(uint64_t session_id, const std::string& key, uint32_t nranks,
                            uint32_t rank, std::optional<NodesOfComm> nodes,
                            const CommunicatorRegistry::Resume& resume,
                            const CommSettings& settings) {
  Session& s = sessions_.get(session_id);
  std::shared_ptr<const NodeLayout> layout;
  if (nodes) {
    layout =
        scale_out_.check_layout(key, std::move(nodes->addresses), std::move(nodes->node_of_rank),
                                std::move(nodes->secret), nranks, rank, resume.seq != 0);
  }
  CommSettings granted = settings;
  const Pacing& pacing = copies_.pacing();
  granted.latency_granted = pacing.latency_uids.count(s.peer().uid) != 0 ||
                            in_group(s.peer().pid, s.peer().gid, pacing.latency_group);
  const uint64_t id = comms_.join(s, key, nranks, rank, layout, resume, granted);
  if (settings.traffic_class == RequestedClass::kLatency && !granted.latency_granted)
    tenant_log_.log(spdlog::level::info, s.peer().uid, TenantLogKind::kCommunicator,
                    "comm '{}' rank {} asks for latency, which uid {} has up to {} bytes a copy "
                    "(--latency-uids or --latency-group grants more): its larger collectives run "
                    "as bulk",
                    printable(key, 64), rank, s.peer().uid, copies_.latency_max_bytes());
  // Sides of its peers waiting since the restart that this rank's side had completed.
  if (resume.seq != 0) p2p_.resumed_rank(*comms_.find(id), rank);
  if (layout) {
    try {
      scale_out_.joined(*comms_.find(id));
    } catch (const Error&) {
      // Its nodes cannot be reached: the rank does not stay in a communicator it cannot use.
      comms_.leave(s, id, "could not connect to the communicator's other nodes");
      throw;
    }
  }
  return id;
}

std::string Runtime::node_address() { return scale_out_.address(); }

void Runtime::add_api_work(const v1::ReportApiWork& report) {
  for (const auto& w : report.operations())
    if (w.operation() >= kApiOperationCount || w.calls() > kMaxApiCallsPerReport ||
        w.irisd_bytes() > kMaxApiBytesPerReport || w.sm_kernel_bytes() > kMaxApiBytesPerReport ||
        w.host_bytes() > kMaxApiBytesPerReport || w.fallback_bytes() > kMaxApiBytesPerReport)
      throw Error(ErrorCode::kInvalidArgument,
                  "a report of API operations with operation " + std::to_string(w.operation()) +
                      " (of " + std::to_string(kApiOperationCount) +
                      ") or a figure past its bound (2^40 calls, 2^56 bytes a report)");
  for (const auto& w : report.operations()) {
    ApiOperationCounters& c = stats_.api_operations[w.operation()];
    add_from_loop(c.calls_total, static_cast<int64_t>(w.calls()));
    add_from_loop(c.irisd_bytes_total, static_cast<int64_t>(w.irisd_bytes()));
    add_from_loop(c.sm_kernel_bytes_total, static_cast<int64_t>(w.sm_kernel_bytes()));
    add_from_loop(c.host_bytes_total, static_cast<int64_t>(w.host_bytes()));
    add_from_loop(c.fallback_bytes_total, static_cast<int64_t>(w.fallback_bytes()));
  }
}

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
  leave_comm(sessions_.get(session_id), comm_id, "left (destroyed its communicator)");
}

void Runtime::leave_comm(Session& s, uint64_t comm_id, const std::string& how) {
  if (s.comm_ranks.count(comm_id) != 0) plans_.release_comm(s, comm_id, how);
  comms_.leave(s, comm_id, how);  // kNotFound for a communicator the session holds no rank in
  // The ranks that stay learn it from their sends and receives too, in the same words.
  const Communicator* comm = comms_.find(comm_id);
  if (comm != nullptr && comm->broken)
    p2p_.break_comm(comm_id, comm->broken_code, comm->broken_why);
  else
    p2p_.break_comm(comm_id, ErrorCode::kPeerLost, "every rank left the communicator");
}

void Runtime::register_graph_plan(uint64_t session_id, const shm::SubmitEntry& entry,
                                  uint32_t plan_slot, bool resumed, uint64_t completed_replays) {
  Session& s = sessions_.get(session_id);
  auto admitted = arrivals_.admit_graph_entry(s, entry);
  plans_.add(s, plan_slot, admitted.comm, admitted.rank, std::move(admitted.request), admitted.pair,
             resumed, completed_replays);
}

void Runtime::release_graph_plan(uint64_t session_id, uint32_t plan_slot) {
  plans_.release(sessions_.get(session_id), plan_slot);
}

void Runtime::mark_all_stopped() {
  completer_.stop();
  scale_out_.stop();
  for (Session* s : sessions_.list()) s->mark_daemon_stopped();
}

}  // namespace iris::daemon
