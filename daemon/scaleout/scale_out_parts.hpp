// The parts of ScaleOut, one class per job, and the state they share. ScaleOut (scale_out.cpp)
// keeps membership and dispatch; ArrivalSender (scale_out_send.cpp) sends local ranks' arrivals,
// ArrivalReceiver (scale_out_receive.cpp) takes other nodes' arrivals in, NodeRestarts
// (scale_out_restart.cpp) carries a communicator through a node's restart (rejoin, what is sent
// again), NodeLiveness (scale_out_liveness.cpp) holds nodes that went away, applies breaks and
// tells retirements. Each communicator's CommState is shared: every part reads and writes it, on
// the progress thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/collectives/collective_scheduler.hpp"
#include "daemon/collectives/communicator_registry.hpp"
#include "daemon/collectives/node_layout.hpp"
#include "daemon/config.hpp"
#include "daemon/operations/tenant_log.hpp"
#include "daemon/progress_loop.hpp"
#include "daemon/scaleout/kept_arrivals.hpp"
#include "daemon/scaleout/node_address_book.hpp"
#include "daemon/scaleout/seq_set.hpp"
#include "daemon/scaleout/staging_pool.hpp"
#include "daemon/scaleout/ucx_worker.hpp"

namespace iris::v1 {
class NodeArrival;
class NodeRejoin;
}  // namespace iris::v1

namespace iris::daemon {

// What this node knows of one multi-node communicator's other nodes.
struct CommState {
  explicit CommState(uint64_t keep_bytes) : kept(keep_bytes) {}
  std::vector<UcxWorker::PeerId> peers;  // by node (this node's entry unused)
  std::vector<bool> joined;              // by node
  std::vector<uint64_t> sent;            // by local rank: arrivals sent to every other node
  std::vector<uint64_t> received;        // by remote rank: its arrivals received here
  std::vector<SeqSet> heard;             // by remote rank: the collectives it arrived at
  std::set<std::pair<uint32_t, uint64_t>> landing;  // (rank, seq): its data still coming
  std::vector<uint64_t> epoch;  // by node: its rejoins so far (older arrivals are dropped)
  // By node: its irisd went away (or, here after a restart, has not answered the rejoin yet);
  // held until then, then the communicator fails with peer_lost.
  std::vector<std::optional<std::chrono::steady_clock::time_point>> away_until;
  std::vector<std::string> away_why;
  KeptArrivals kept;              // with a resume window only
  std::vector<uint64_t> retired;  // collectives retired here, to tell the other nodes
  SeqSet retired_here;            // every collective retired here
  bool rejoined = false;          // a resumed communicator's NodeRejoin went out
};

// Another node's break, applied once the arrivals its ranks sent before it have come in (they
// may still be landing: their data moves after their header), or at `deadline`.
struct ParkedBreak {
  uint64_t comm_id;
  std::string key;
  std::string why;
  std::vector<std::pair<uint32_t, uint64_t>> arrivals;  // (rank, arrivals it sent)
  std::chrono::steady_clock::time_point deadline;
};

// What every part of ScaleOut shares. Owned by ScaleOut.
struct ScaleOutShared {
  ScaleOutShared(const Config& config, CollectiveScheduler& scheduler, TenantLog& log,
                 CommunicatorRegistry& comms, CopyDispatcher& copies, ProgressLoop& loop,
                 UcxWorker::Listener& listener);
  ~ScaleOutShared();
  // The UCX worker, started on first use. Throws iris::Error kUnavailable when it cannot start.
  UcxWorker& worker();
  bool keeping() const {
    return config.limits.resume_window_ms > 0 && config.limits.resume_keep_bytes > 0;
  }

  const Config& config;
  CollectiveScheduler& scheduler;
  CopyDispatcher& copies;  // staging copies of GPU data into host memory
  TenantLog& log;
  CommunicatorRegistry& comms;
  ProgressLoop& loop;
  UcxWorker::Listener& listener;
  // Released blocks kept pinned for reuse: plenty for a busy job's messages, and about 64 MiB
  // pinned while idle (plus the unused rest of at most one slab per block size).
  static constexpr uint64_t kStagingCachedBytes = 64ull << 20;
  StagingPool staging;  // before worker_: what UCX still sends lives in it
  std::unique_ptr<UcxWorker> worker_;
  NodeAddressBook book;
  std::unordered_map<uint64_t, CommState> states;  // by communicator id
  // Some communicator holds a node or has retired collectives to tell (NodeLiveness has work).
  bool tend = false;
  bool stopping = false;
};

// A part: the shared state under the names the parts use.
class ScaleOutPart {
 protected:
  explicit ScaleOutPart(ScaleOutShared& shared)
      : shared_(shared),
        config_(shared.config),
        scheduler_(shared.scheduler),
        copies_(shared.copies),
        log_(shared.log),
        comms_(shared.comms),
        staging_(shared.staging),
        states_(shared.states),
        tend_(shared.tend) {}
  UcxWorker& worker() { return shared_.worker(); }
  bool keeping() const { return shared_.keeping(); }
  template <typename... Args>
  void warn(fmt::format_string<Args...> format, Args&&... args);

  ScaleOutShared& shared_;
  const Config& config_;
  CollectiveScheduler& scheduler_;
  CopyDispatcher& copies_;
  TenantLog& log_;
  CommunicatorRegistry& comms_;
  StagingPool& staging_;
  std::unordered_map<uint64_t, CommState>& states_;
  bool& tend_;
};

// Holds nodes that went away for the resume window (then fails their communicators), applies
// other nodes' breaks once what their ranks sent has come in, and tells retirements.
class NodeLiveness : ScaleOutPart {
 public:
  explicit NodeLiveness(ScaleOutShared& shared) : ScaleOutPart(shared) {}
  // Node `node` went away (`why`): held for the resume window.
  void hold(const Communicator& comm, CommState& state, uint32_t node, const std::string& why);
  // Held nodes past their deadline fail their communicators; retired collectives are told (in
  // batches, or all of them when the loop is `idle`).
  bool tend_nodes(bool idle);
  void park(ParkedBreak parked) { parked_breaks_.push_back(std::move(parked)); }
  // Applies the parked breaks that may go now; true when one did.
  bool apply_parked_breaks();
  bool nothing_parked() const { return parked_breaks_.empty(); }
  // UCX says the connection to `peer` failed: every communicator with a node there holds it (or
  // fails, without a resume window).
  void peer_failed(UcxWorker::PeerId peer, const std::string& why);

 private:
  std::vector<ParkedBreak> parked_breaks_;
};

// Sends local ranks' arrivals to the other nodes of their communicators.
class ArrivalSender : ScaleOutPart {
 public:
  ArrivalSender(ScaleOutShared& shared, NodeLiveness& liveness)
      : ScaleOutPart(shared), liveness_(liveness) {}
  // RemoteNodes::send_arrival.
  std::optional<PlanError> send_arrival(Communicator& comm, Collective& c, uint32_t rank,
                                        const NetworkHold& hold);
  // Sends a local rank's arrival (header, and data when not null) to `node`; with a resume
  // window it is kept until that node completed the collective, and held while the node is away.
  // `part` (of the rank's hold) ends once it has left this node, or is kept while the node is
  // away.
  void send_and_keep(uint64_t comm_id, uint32_t node, uint64_t seq, uint32_t rank,
                     std::string header, std::shared_ptr<StagedData> data, NetworkHold part);

 private:
  // A local rank's arrival for one other node: its header (the NodeArrival) and where it goes.
  struct OutgoingArrival {
    uint64_t comm_id;
    uint32_t node;
    uint64_t seq;
    uint32_t rank;
    std::string header;
  };
  // Sends `out` with `bytes` of the rank's send buffer `from` at `offset`, by the strategy its
  // memory takes: none (the header alone), host memory sent directly (no resume window), GPU
  // memory staged into pinned host memory by the engine and then sent, small host memory copied
  // here for keeping, or large host memory sent directly while the engine copies it for keeping.
  // Each transfer takes a part of `hold`.
  void send_block(const OutgoingArrival& out, const std::shared_ptr<MappedBuffer>& from,
                  uint64_t offset, uint64_t bytes, const NetworkHold& hold);
  void send_staged_from_gpu(const OutgoingArrival& out, const std::shared_ptr<MappedBuffer>& from,
                            uint64_t offset, std::shared_ptr<StagedData> staged, NetworkHold part);
  void send_host_while_copying(const OutgoingArrival& out,
                               const std::shared_ptr<MappedBuffer>& from, uint64_t offset,
                               std::shared_ptr<StagedData> staged, NetworkHold send_part,
                               NetworkHold copy_part);
  // Sends `header` and `size` bytes at `bytes` to `node` unless it is away; `owner` keeps them
  // alive until the send ends. A transfer that fails to a node (with a resume window) holds the
  // node and counts as ended. Then `part` ends (if it holds), and `after` learns whether the
  // message reached the node.
  void send_or_hold(uint64_t comm_id, uint32_t node, std::string header, const void* bytes,
                    std::size_t size, std::shared_ptr<const void> owner, NetworkHold part,
                    std::function<void(bool reached)> after);

  NodeLiveness& liveness_;
};

// Takes another node's arrival in: checked against the communicator, its data landed, handed to
// the scheduler.
class ArrivalReceiver : ScaleOutPart {
 public:
  ArrivalReceiver(ScaleOutShared& shared, NodeLiveness& liveness)
      : ScaleOutPart(shared), liveness_(liveness) {}
  void handle_arrival(Communicator& comm, CommState& state, const v1::NodeArrival& arrival,
                      UcxWorker::Payload& payload);

 private:
  NodeLiveness& liveness_;
};

// Carries a communicator through a node's restart: the restarted node's rejoin, and what is sent
// to it again.
class NodeRestarts : ScaleOutPart {
 public:
  explicit NodeRestarts(ScaleOutShared& shared) : ScaleOutPart(shared) {}
  void handle_rejoin(Communicator& comm, CommState& state, const v1::NodeRejoin& rejoin);
  // Node `node` answered this resumed node's rejoin: what was kept for it goes now.
  void answered(Communicator& comm, CommState& state, uint32_t node);

 private:
  // Sends node `node` again what was kept for it, but for the collectives `completed` says every
  // rank of it completed; how many went. Null when one it needs was dropped over the bound: the
  // communicator is then failed (peer_lost).
  std::optional<std::size_t> send_again(Communicator& comm, CommState& state, uint32_t node,
                                        const std::function<bool(uint64_t)>& completed);
};

}  // namespace iris::daemon
