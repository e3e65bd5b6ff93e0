// The daemon's data path, assembled: the registries, and the rooms a ring entry passes through,
// each a poller of the progress loop in this order: rings (datapath/ring_poller) -> arrivals
// (datapath/arrivals: sequence, validation, stream-ordered waits) -> graph plans -> scale out ->
// copy dispatcher (engines/copy_dispatcher: engine completions, each to the scheduler or a
// staging callback) -> point to point -> completer (sessions/completer: slot, done flag, wake) ->
// communicator removal -> watchdog. The scheduler (collectives/collective_scheduler) is called by
// these, not polled. Runtime itself carries out the front doors' session, buffer, communicator
// and graph calls on them. Everything here runs on the progress thread (see ProgressLoop), so
// none of it is locked.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "daemon/collectives/collective_scheduler.hpp"
#include "daemon/collectives/comm_watchdog.hpp"
#include "daemon/collectives/communicator_registry.hpp"
#include "daemon/collectives/graph_plans.hpp"
#include "daemon/config.hpp"
#include "daemon/datapath/arrivals.hpp"
#include "daemon/datapath/ring_poller.hpp"
#include "daemon/progress_loop.hpp"
#include "daemon/scaleout/scale_out.hpp"
#include "daemon/sessions/buffer_registry.hpp"
#include "daemon/sessions/completer.hpp"
#include "daemon/sessions/session_registry.hpp"
#include "iris/error.hpp"
#include "iris/v1/attach.pb.h"

#include <spdlog/spdlog.h>

namespace iris::daemon {

struct AttachResult {
  uint64_t session_id;
  uint32_t ring_depth;
  net::Fd wake;     // a duplicate of the session's wake eventfd, for the client
  net::Fd segment;  // the session segment's sealed memfd, for the client
};

class Runtime {
 public:
  Runtime(const Config& config, Engine& engine, Stats& stats, ProgressLoop& loop);
  ~Runtime();

  // Sessions. Throw iris::Error with a code and an operator-facing message.
  // `connection` is the attach connection; the session keeps a duplicate to close it at its end.
  // A client of a previous irisd resuming its session (see SessionRegistry::create).
  struct Resume {
    net::Fd segment;
    uint64_t previous_session_id = 0;
    uint64_t held_ms = 0;          // the client's word: only logged, clamped
    uint64_t next_buffer_id = 1;   // the session's own names: ids below it are not given again
    std::string previous_version;  // the client's word: only logged
  };
  AttachResult attach(const net::PeerCredentials& peer, const std::string& client_name,
                      int connection, std::optional<Resume> resume = std::nullopt);
  // The client has its attach answer: the session's ring is read from now on (Session::serving).
  // Unknown ids are ignored.
  void start_serving(uint64_t session_id);
  // Ends a session: `lost` when its connection dropped without Detach. Unknown ids are ignored.
  void end_session(uint64_t session_id, bool lost);

  RegisteredBuffer register_buffer(uint64_t session_id, uint64_t bytes);
  // `resume_id`: resuming, the id the previous irisd gave it (0: a new id).
  RegisteredBuffer register_device_buffer(uint64_t session_id, const DeviceBufferExport& exported,
                                          uint64_t resume_id = 0);
  // Resuming: a host buffer the previous irisd allocated for the session, sent back as its memfd.
  void adopt_host_buffer(uint64_t session_id, uint64_t buffer_id, uint64_t bytes, net::Fd memfd);
  // Host memory the client holds as a sealed memfd (another session's buffer) for this session.
  RegisteredBuffer share_host_buffer(uint64_t session_id, uint64_t bytes, net::Fd memfd);
  void register_device_done_flags(uint64_t session_id, const DeviceBufferExport& exported);
  void deregister_buffer(uint64_t session_id, uint64_t buffer_id);
  // A communicator across nodes: every node's address, every rank's node, the job's secret.
  struct NodesOfComm {
    std::vector<std::string> addresses;
    std::vector<uint32_t> node_of_rank;
    std::string secret;
  };
  // `resume_seq` > 0: the rank comes back after a restart with the communicator's `secret`
  // (CommunicatorRegistry::join). Returns the id; comms().find(id)->secret goes to the rank.
  uint64_t comm_init(uint64_t session_id, const std::string& key, uint32_t nranks, uint32_t rank,
                     std::optional<NodesOfComm> nodes = std::nullopt,
                     const CommunicatorRegistry::Resume& resume = {},
                     const CommSettings& settings = {});
  // This daemon's address for other nodes (starts UCX). Throws iris::Error kUnavailable.
  std::string node_address();
  // A library's report of its API's operations (ReportApiWork): added to the stats, or refused
  // whole (kInvalidArgument) when an operation or a figure is out of bounds.
  void add_api_work(const v1::ReportApiWork& report);
  // Where this daemon's meeting point listens (HOST:PORT); empty when it has none.
  const std::string& meeting_address() const { return meeting_address_; }
  // How many of the nodes of the session's communicator `comm_id` have joined it, of how many
  // (1 of 1 for a communicator within this daemon).
  std::pair<uint32_t, uint32_t> comm_nodes_joined(uint64_t session_id, uint64_t comm_id);
  void comm_destroy(uint64_t session_id, uint64_t comm_id);
  // A collective captured into a CUDA graph (graph_plans.hpp): `entry` is the ring entry the
  // call would have submitted. Throws iris::Error naming what is wrong with it.
  // `resumed`: after a restart, with the replays the plan completed before it (GraphPlans::add).
  void register_graph_plan(uint64_t session_id, const shm::SubmitEntry& entry, uint32_t plan_slot,
                           bool resumed = false, uint64_t completed_replays = 0);
  void release_graph_plan(uint64_t session_id, uint32_t plan_slot);

  const SessionRegistry& sessions() const { return sessions_; }
  const CommunicatorRegistry& comms() const { return comms_; }
  const GraphPlans& graph_plans() const { return plans_; }
  const PointToPoint& point_to_point() const { return p2p_; }
  // Lines a tenant causes, limited per uid (the attach thread logs through it too).
  TenantLog& tenant_log() { return tenant_log_; }
  // Immutable after start: safe to read from any thread.
  const EngineDescription& engine_description() const { return engine_.description(); }

  // Clean shutdown: tell every client the daemon is gone.
  void mark_all_stopped();

 private:
  // `s` leaves communicator `comm_id` (`how`: why, for the others): its graph plans go, and the
  // communicator's collectives and sends and receives fail for the ranks that stay.
  void leave_comm(Session& s, uint64_t comm_id, const std::string& how);

  const std::string meeting_address_;
  Engine& engine_;
  Stats& stats_;
  ProgressLoop& loop_;
  const std::chrono::steady_clock::time_point started_at_ = std::chrono::steady_clock::now();
  TenantLog tenant_log_;
  SessionRegistry sessions_;
  Completer completer_;
  CopyDispatcher copies_;
  CollectiveScheduler scheduler_;
  BufferRegistry buffers_;
  CommunicatorRegistry comms_;
  GraphPlans plans_;
  ScaleOut scale_out_;
  PointToPoint p2p_;
  CommWatchdog watchdog_;
  Arrivals arrivals_;
  RingPoller rings_;
};

}  // namespace iris::daemon
