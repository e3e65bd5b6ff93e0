// Communicators across nodes: each node's irisd runs the ranks on its node; the daemons of a
// communicator exchange, per collective and local rank, the rank's arguments and the bytes of its
// send buffer the other node's ranks need: one network transfer per (node pair, rank's block
// range), the fan-out to that node's ranks done there by its copy engines. Nothing else crosses.
//
// Restarts: with a resume window (--resume-window-ms), a node whose irisd goes away is held for
// that long, not failed, and each node keeps a copy of what it sent another until that node's
// ranks have all completed the collective (KeptArrivals). The restarted irisd, once its ranks are
// back, tells the others its new address and what its ranks had completed (NodeRejoin); they
// send again what it still needs, and each side drops the arrivals it has already heard of
// (SeqSet), so every collective still completes once.
//
// Trust: a daemon acts on a message only for a communicator one of its own ranks joined, with
// the same secret (the job makes it; every rank passes it at init). Messages for communicators
// not joined here yet are dropped, except joins, kept (a bounded number) until a local rank
// joins. UCX is started on first use (the first node_address() or multi-node communicator), so
// a daemon that never scales out never loads a transport.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
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

class ScaleOut final : public RemoteNodes, public UcxWorker::Listener, public Poller {
 public:
  ScaleOut(const Config& config, CollectiveScheduler& scheduler, TenantLog& log,
           CommunicatorRegistry& comms, CopyDispatcher& copies, ProgressLoop& loop);
  ~ScaleOut() override;

  // This daemon's node address, for a job's ranks to exchange (starts UCX). Throws iris::Error
  // kUnavailable when UCX cannot start here.
  const std::string& address();
  // Checks the layout a rank passed at init (addresses from node_address() of each node's
  // irisd, the node of every rank, the secret) and finds this daemon in it. A rank `resuming`
  // after irisd restarted passes the previous irisd's address for this node: its node is the
  // rank's, and this irisd's address takes its place, and other nodes' take the addresses they
  // rejoined with since (NodeAddressBook). Throws iris::Error naming what is wrong.
  std::shared_ptr<const NodeLayout> check_layout(const std::string& key,
                                                 std::vector<std::string> addresses,
                                                 std::vector<uint32_t> node_of_rank,
                                                 std::string secret, uint32_t nranks, uint32_t rank,
                                                 bool resuming);
  // A local rank joined the multi-node communicator `comm`: on its first, connect to its other
  // nodes and tell them; a resumed one, once every local rank is back, rejoins them.
  void joined(Communicator& comm);
  // irisd is stopping and its clients will resume with the next one: the other nodes are told
  // nothing (they hold this node for the resume window).
  void stop() { stopping_ = true; }
  // How many of its nodes have joined `comm` (this one included), of how many.
  std::pair<uint32_t, uint32_t> nodes_joined(const Communicator& comm) const;

  // Poller: UCX progress and other nodes' parked breaks; UCX armed before the loop sleeps.
  bool poll() override;
  bool try_enter_sleep() override;

  // RemoteNodes.
  std::optional<PlanError> send_arrival(Communicator& comm, Collective& c, uint32_t rank,
                                        const NetworkHold& hold) override;
  void broke_here(Communicator& comm, const std::string& why) override;
  void retired(Communicator& comm, uint64_t seq) override;
  void forget(const Communicator& comm) override;
  // UcxWorker::Listener.
  void on_message(std::string_view header, UcxWorker::Payload& payload) override;
  void on_peer_failed(UcxWorker::PeerId peer, const std::string& why) override;

 private:
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
  struct PendingJoin {
    std::string key;
    std::string secret;
    uint32_t nranks;
    uint32_t node;
  };
  UcxWorker& worker();
  // The multi-node communicator `key` whose secret and size match, else null.
  Communicator* authenticated(const std::string& key, const std::string& secret, uint32_t nranks);
  void note_join(Communicator& comm, uint32_t node);
  void handle_arrival(Communicator& comm, CommState& state, const v1::NodeArrival& arrival,
                      UcxWorker::Payload& payload);
  void handle_rejoin(Communicator& comm, CommState& state, const v1::NodeRejoin& rejoin);
  // Node `node` answered this resumed node's rejoin: what was kept for it goes now.
  void answered(Communicator& comm, CommState& state, uint32_t node);
  // Sends node `node` again what was kept for it, but for the collectives `completed` says every
  // rank of it completed; how many went. Null when one it needs was dropped over the bound: the
  // communicator is then failed (peer_lost).
  std::optional<std::size_t> send_again(Communicator& comm, CommState& state, uint32_t node,
                                        const std::function<bool(uint64_t)>& completed);
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
  // Sends a local rank's arrival (header, and data when not null) to `node`; with a resume
  // window it is kept until that node completed the collective, and held while the node is away.
  // `part` (of the rank's hold) ends once it has left this node, or is kept while the node is
  // away.
  void send_and_keep(uint64_t comm_id, uint32_t node, uint64_t seq, uint32_t rank,
                     std::string header, std::shared_ptr<StagedData> data, NetworkHold part);
  // Sends `header` and `size` bytes at `bytes` to `node` unless it is away; `owner` keeps them
  // alive until the send ends. A transfer that fails to a node (with a resume window) holds the
  // node and counts as ended. Then `part` ends (if it holds), and `after` learns whether the
  // message reached the node.
  void send_or_hold(uint64_t comm_id, uint32_t node, std::string header, const void* bytes,
                    std::size_t size, std::shared_ptr<const void> owner, NetworkHold part,
                    std::function<void(bool reached)> after);
  // Node `node` went away (`why`): held for the resume window.
  void hold(const Communicator& comm, CommState& state, uint32_t node, const std::string& why);
  // Held nodes past their deadline fail their communicators; retired collectives are told (in
  // batches, or all of them when the loop is `idle`).
  bool tend_nodes(bool idle);
  bool keeping() const {
    return config_.limits.resume_window_ms > 0 && config_.limits.resume_keep_bytes > 0;
  }
  void send_to_nodes(Communicator& comm, const std::string& header_for_all);
  // Applies the parked breaks that may go now; true when one did.
  bool apply_parked_breaks();
  template <typename... Args>
  void warn(fmt::format_string<Args...> format, Args&&... args);

  const Config& config_;
  CollectiveScheduler& scheduler_;
  CopyDispatcher& copies_;  // staging copies of GPU data into host memory
  TenantLog& log_;
  CommunicatorRegistry& comms_;
  ProgressLoop& loop_;
  // Released blocks kept pinned for reuse: plenty for a busy job's messages, and about 64 MiB
  // pinned while idle (plus the unused rest of at most one slab per block size).
  static constexpr uint64_t kStagingCachedBytes = 64ull << 20;
  StagingPool staging_;  // before worker_: what UCX still sends lives in it
  std::unique_ptr<UcxWorker> worker_;
  NodeAddressBook book_;
  std::unordered_map<uint64_t, CommState> states_;  // by communicator id
  // Multi-node communicators here by key: several users' (or a resumed and a new one) may share
  // a key, and a message reaches the one whose secret it carries.
  std::unordered_multimap<std::string, uint64_t> by_key_;
  std::deque<PendingJoin> pending_joins_;
  std::vector<ParkedBreak> parked_breaks_;
  // Some communicator holds a node or has retired collectives to tell (tend_nodes has work).
  bool tend_ = false;
  bool stopping_ = false;
};

}  // namespace iris::daemon
