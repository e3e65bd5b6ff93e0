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

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "daemon/scaleout/scale_out_parts.hpp"

namespace iris::daemon {

// ScaleOutShared, constructed before ScaleOut's parts (a base, so that it comes first).
struct ScaleOutSharedHolder {
  template <typename... Args>
  explicit ScaleOutSharedHolder(Args&&... args) : shared_state_(std::forward<Args>(args)...) {}
  ScaleOutShared shared_state_;
};

class ScaleOut final : private ScaleOutSharedHolder,
                       ScaleOutPart,
                       public RemoteNodes,
                       public UcxWorker::Listener,
                       public Poller {
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
  void stop() { shared_.stopping = true; }
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
  struct PendingJoin {
    std::string key;
    std::string secret;
    uint32_t nranks;
    uint32_t node;
  };
  // The multi-node communicator `key` whose secret and size match, else null.
  Communicator* authenticated(const std::string& key, const std::string& secret, uint32_t nranks);
  void note_join(Communicator& comm, uint32_t node);
  void send_to_nodes(Communicator& comm, const std::string& header_for_all);

  NodeLiveness liveness_;
  ArrivalSender sender_;
  ArrivalReceiver receiver_;
  NodeRestarts restarts_;
  // Multi-node communicators here by key: several users' (or a resumed and a new one) may share
  // a key, and a message reaches the one whose secret it carries.
  std::unordered_multimap<std::string, uint64_t> by_key_;
  std::deque<PendingJoin> pending_joins_;
};

}  // namespace iris::daemon
