// The daemon's data path, on the progress thread: it polls the sessions' rings, dispatches each
// request (validation, stream-ordered arrivals, the collective scheduler), feeds engine
// completions back, and writes completions; and it carries out the front doors' session,
// buffer and communicator calls on the registries. Everything here runs on the progress thread
// (see ProgressLoop), so none of it is locked.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "daemon/collectives/collective_scheduler.hpp"
#include "daemon/collectives/communicator_registry.hpp"
#include "daemon/collectives/graph_plans.hpp"
#include "daemon/config.hpp"
#include "daemon/progress_loop.hpp"
#include "daemon/scaleout/scale_out.hpp"
#include "daemon/sessions/buffer_registry.hpp"
#include "daemon/sessions/session_registry.hpp"
#include "iris/error.hpp"

#include <spdlog/spdlog.h>

namespace iris::daemon {

struct AttachResult {
  uint64_t session_id;
  uint32_t ring_depth;
  net::Fd wake;     // a duplicate of the session's wake eventfd, for the client
  net::Fd segment;  // the session segment's sealed memfd, for the client
};

class Runtime final : public LoopWork {
 public:
  Runtime(const Config& config, Engine& engine, Stats& stats, ProgressLoop& loop);
  ~Runtime() override;

  // Sessions. Throw iris::Error with a code and an operator-facing message.
  // `connection` is the attach connection; the session keeps a duplicate to close it at its end.
  AttachResult attach(const net::PeerCredentials& peer, const std::string& client_name,
                      int connection);
  // Ends a session: `lost` when its connection dropped without Detach. Unknown ids are ignored.
  void end_session(uint64_t session_id, bool lost);

  RegisteredBuffer register_buffer(uint64_t session_id, uint64_t bytes);
  RegisteredBuffer register_device_buffer(uint64_t session_id, const DeviceBufferExport& exported);
  void register_device_done_flags(uint64_t session_id, const DeviceBufferExport& exported);
  void deregister_buffer(uint64_t session_id, uint64_t buffer_id);
  // A communicator across nodes: every node's address, every rank's node, the job's secret.
  struct NodesOfComm {
    std::vector<std::string> addresses;
    std::vector<uint32_t> node_of_rank;
    std::string secret;
  };
  uint64_t comm_init(uint64_t session_id, const std::string& key, uint32_t nranks, uint32_t rank,
                     std::optional<NodesOfComm> nodes = std::nullopt);
  // This daemon's address for other nodes (starts UCX). Throws iris::Error kUnavailable.
  std::string node_address();
  // How many of the nodes of the session's communicator `comm_id` have joined it, of how many
  // (1 of 1 for a communicator within this daemon).
  std::pair<uint32_t, uint32_t> comm_nodes_joined(uint64_t session_id, uint64_t comm_id);
  void comm_destroy(uint64_t session_id, uint64_t comm_id);
  // A collective captured into a CUDA graph (graph_plans.hpp): `entry` is the ring entry the
  // call would have submitted. Throws iris::Error naming what is wrong with it.
  void register_graph_plan(uint64_t session_id, const shm::SubmitEntry& entry, uint32_t plan_slot);
  void release_graph_plan(uint64_t session_id, uint32_t plan_slot);

  const SessionRegistry& sessions() const { return sessions_; }
  const CommunicatorRegistry& comms() const { return comms_; }
  const GraphPlans& graph_plans() const { return plans_; }
  // Lines a tenant causes, limited per uid (the attach thread logs through it too).
  TenantLog& tenant_log() { return tenant_log_; }
  // Immutable after start: safe to read from any thread.
  const EngineDescription& engine_description() const { return engine_.description(); }

  // Clean shutdown: tell every client the daemon is gone.
  void mark_all_stopped();

  bool poll_once() override;
  void set_sleeping(bool sleeping) override;
  bool has_ready_work() override;

 private:
  void handle_entry(Session& s, const shm::SubmitEntry& e);
  void handle_collective(Session& s, const shm::SubmitEntry& e);
  // Stream-ordered arrivals whose GPU stream has now reached the call go to the scheduler.
  bool start_ready_stream_arrivals();
  // Writes a completion (and, for a failure, why) into the session's slot and GPU done flag.
  void complete(const CompletionTarget& target, ErrorCode code, std::string why = {});
  // The communicators gauge, after anything that may add or remove one.
  void count_comms();
  // A warning caused by a session's own requests, rate-limited per user.
  template <typename... Args>
  void session_warn(Session& s, fmt::format_string<Args...> format, Args&&... args);

  Engine& engine_;
  Stats& stats_;
  ProgressLoop& loop_;
  TenantLog tenant_log_;
  CollectiveScheduler scheduler_;
  SessionRegistry sessions_;
  BufferRegistry buffers_;
  CommunicatorRegistry comms_;
  GraphPlans plans_;
  ScaleOut scale_out_;

  std::vector<uint64_t> sessions_to_end_;  // found corrupt while polling
  // A validated stream-ordered request, waiting for its rank's GPU stream to reach the call.
  struct AwaitingStream {
    CompletionTarget target;
    uint64_t comm_id;
    uint32_t rank;
    uint64_t seq;
    ValidatedRequest request;
    std::chrono::steady_clock::time_point seen;  // when its ring entry was popped
  };
  std::vector<AwaitingStream> awaiting_stream_;
  std::vector<CopyCompletion> completions_;
};

}  // namespace iris::daemon
