// ScaleOut's membership and dispatch: UCX started on first use, a communicator's layout checked,
// nodes joining, messages from other nodes authenticated and handed to the part that takes them
// (ArrivalReceiver, NodeRestarts), retirements told to the other nodes; and the state the parts
// share (ScaleOutShared, with the UCX worker). The parts: scale_out_parts.hpp.
#include "daemon/scaleout/scale_out.hpp"

#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>

#include "daemon/scaleout/scale_out_internal.hpp"
#include "iris/error.hpp"
#include "iris/shared/collective_shape.hpp"
#include "iris/v1/scaleout.pb.h"

namespace iris::daemon {

using namespace scale_out_limits;

ScaleOutShared::ScaleOutShared(const Config& config, CollectiveScheduler& scheduler, TenantLog& log,
                               CommunicatorRegistry& comms, CopyDispatcher& copies,
                               ProgressLoop& loop, UcxWorker::Listener& listener)
    : config(config),
      scheduler(scheduler),
      copies(copies),
      log(log),
      comms(comms),
      loop(loop),
      listener(listener),
      staging(copies.engine(), kStagingCachedBytes),
      book(config.socket_path + ".nodes") {}

ScaleOutShared::~ScaleOutShared() {
  if (worker_) loop.unwatch(worker_->event_fd());
}

UcxWorker& ScaleOutShared::worker() {
  if (!config.scale_out)
    throw Error(ErrorCode::kUnavailable,
                "this irisd runs with --no-scale-out: communicators across nodes are off here "
                "(ask the operator)");
  if (!worker_) {
    worker_ = std::make_unique<UcxWorker>(listener, config.scale_out_interface);
    loop.watch(worker_->event_fd());
    spdlog::info("scale-out: UCX worker started ({} byte address)", worker_->address().size());
  }
  return *worker_;
}

ScaleOut::ScaleOut(const Config& config, CollectiveScheduler& scheduler, TenantLog& log,
                   CommunicatorRegistry& comms, CopyDispatcher& copies, ProgressLoop& loop)
    : ScaleOutSharedHolder(config, scheduler, log, comms, copies, loop,
                           static_cast<UcxWorker::Listener&>(*this)),
      ScaleOutPart(shared_state_),
      liveness_(shared_state_),
      sender_(shared_state_, liveness_),
      receiver_(shared_state_, liveness_),
      restarts_(shared_state_) {
  scheduler_.set_remote_nodes(this);
}

ScaleOut::~ScaleOut() { scheduler_.set_remote_nodes(nullptr); }

std::optional<PlanError> ScaleOut::send_arrival(Communicator& comm, Collective& c, uint32_t rank,
                                                const NetworkHold& hold) {
  return sender_.send_arrival(comm, c, rank, hold);
}

void ScaleOut::on_peer_failed(UcxWorker::PeerId peer, const std::string& why) {
  liveness_.peer_failed(peer, why);
}

bool ScaleOut::try_enter_sleep() {
  if (liveness_.tend_nodes(true)) return false;  // told what retired
  // Parked breaks wait on arrivals or their deadline: the loop keeps turning meanwhile.
  return liveness_.nothing_parked() && (!shared_.worker_ || shared_.worker_->arm());
}

const std::string& ScaleOut::address() { return worker().address(); }

std::shared_ptr<const NodeLayout> ScaleOut::check_layout(const std::string& key,
                                                         std::vector<std::string> addresses,
                                                         std::vector<uint32_t> node_of_rank,
                                                         std::string secret, uint32_t nranks,
                                                         uint32_t rank, bool resuming) {
  auto bad = [](const std::string& what) {
    throw Error(ErrorCode::kInvalidArgument, "multi-node communicator: " + what);
  };
  // The registry checks key, rank and size again when the rank joins; the layout needs the rank
  // in range first, to look up its node.
  if (rank >= nranks)
    bad("rank " + std::to_string(rank) + " is out of range for nranks " + std::to_string(nranks));
  if (addresses.size() < 2 || addresses.size() > kMaxNodes)
    bad("needs 2 to " + std::to_string(kMaxNodes) + " node addresses, got " +
        std::to_string(addresses.size()));
  if (node_of_rank.size() != nranks)
    bad("needs the node of each of the " + std::to_string(nranks) + " ranks, got " +
        std::to_string(node_of_rank.size()));
  if (secret.size() < 16 || secret.size() > 1024)
    bad("the job's secret must be 16 to 1024 bytes (random, made by the job), got " +
        std::to_string(secret.size()));
  std::vector<bool> used(addresses.size());
  for (uint32_t node : node_of_rank) {
    if (node >= addresses.size())
      bad("a rank's node " + std::to_string(node) + " is not one of the " +
          std::to_string(addresses.size()) + " nodes");
    used[node] = true;
  }
  if (std::find(used.begin(), used.end(), false) != used.end()) bad("a node holds no rank");
  const std::string& mine = address();
  std::optional<uint32_t> my_node;
  if (resuming) my_node = node_of_rank[rank];
  for (uint32_t n = 0; n < addresses.size(); ++n) {
    if (addresses[n].empty() || addresses[n].size() > kMaxAddressBytes)
      bad("node " + std::to_string(n) + "'s address is empty or too long");
    for (uint32_t m = 0; m < n; ++m)
      if (addresses[m] == addresses[n])
        bad("nodes " + std::to_string(m) + " and " + std::to_string(n) + " have the same address");
    if (!resuming && addresses[n] == mine) my_node = n;
  }
  if (!my_node)
    bad("none of the addresses is this node's irisd: pass each node's node_address() (from a "
        "client of that node's irisd)");
  if (worker().peers() + addresses.size() > kMaxPeers)
    throw Error(ErrorCode::kLimitExceeded,
                "this irisd already keeps connections to " + std::to_string(worker().peers()) +
                    " other nodes' daemons (at most " + std::to_string(kMaxPeers) + ")");
  if (node_of_rank[rank] != *my_node)
    bad("rank " + std::to_string(rank) + " is placed on node " +
        std::to_string(node_of_rank[rank]) + " but attached to node " + std::to_string(*my_node) +
        "'s irisd");
  if (resuming) {
    shared_.book.update(key, secret, addresses);
    addresses[*my_node] = mine;  // the previous irisd's address named this node
  }
  auto layout = std::make_shared<NodeLayout>();
  layout->addresses = std::move(addresses);
  layout->node_of_rank = std::move(node_of_rank);
  layout->my_node = *my_node;
  layout->secret = std::move(secret);
  return layout;
}

void ScaleOut::joined(Communicator& comm) {
  const NodeLayout& layout = *comm.layout;
  auto it = states_.find(comm.id);
  if (it == states_.end()) {
    CommState state(config_.limits.resume_keep_bytes);
    state.peers.resize(layout.nodes());
    state.joined.assign(layout.nodes(), false);
    state.sent.assign(comm.nranks, 0);
    state.received.assign(comm.nranks, 0);
    state.heard.resize(comm.nranks);
    state.away_until.resize(layout.nodes());
    state.away_why.resize(layout.nodes());
    state.epoch.assign(layout.nodes(), 0);
    state.joined[layout.my_node] = true;
    if (comm.resumed) {
      // Every node had joined before the restart; each is held until it answers the rejoin.
      state.joined.assign(layout.nodes(), true);
      const auto deadline = std::chrono::steady_clock::now() +
                            std::chrono::milliseconds(config_.limits.resume_window_ms);
      for (uint32_t n = 0; n < layout.nodes(); ++n) {
        if (n == layout.my_node) continue;
        state.away_until[n] = deadline;
        state.away_why[n] =
            "it did not answer this node's rejoin after this node's irisd restarted";
      }
      tend_ = true;
    }
    for (uint32_t n = 0; n < layout.nodes(); ++n) {
      if (n == layout.my_node) continue;
      try {
        state.peers[n] = worker().connect(layout.addresses[n]);
      } catch (const Error& e) {
        if (!comm.resumed) throw;
        // Held like the others: it may be restarting too, and rejoins here when it is back.
        state.peers[n] = kNoPeer;
        state.away_why[n] =
            "this node's irisd restarted and could not reach it (" + e.message() + ")";
      }
    }
    it = states_.emplace(comm.id, std::move(state)).first;
    by_key_.emplace(comm.key, comm.id);
    if (!comm.resumed) {
      // Joins that came before this node's first rank.
      for (auto p = pending_joins_.begin(); p != pending_joins_.end();) {
        if (p->key == comm.key && p->nranks == comm.nranks &&
            same_secret(p->secret, layout.secret)) {
          note_join(comm, p->node);
          p = pending_joins_.erase(p);
        } else {
          ++p;
        }
      }
      v1::NodeMessage m = envelope(comm);
      m.mutable_join()->set_node(layout.my_node);
      send_to_nodes(comm, m.SerializeAsString());
      return;
    }
  }
  // A resumed communicator rejoins once every rank of this node is back: the other nodes need
  // what each completed to know what to send again.
  if (!comm.resumed || it->second.rejoined || !comm.all_local_joined()) return;
  it->second.rejoined = true;
  v1::NodeMessage m = envelope(comm);
  v1::NodeRejoin& rejoin = *m.mutable_rejoin();
  rejoin.set_node(layout.my_node);
  rejoin.set_address(address());
  for (uint32_t r = 0; r < comm.nranks; ++r) {
    if (!comm.is_local(r)) continue;
    v1::ResumedRank& rank = *rejoin.add_ranks();
    rank.set_rank(r);
    rank.set_resume_seq(comm.resumed_from[r]);
    for (uint64_t seq : comm.resumed_done[r]) rank.add_completed_seqs(seq);
  }
  log_.log(spdlog::level::info, comm.uid, TenantLogKind::kCommunicator,
           "scale-out: communicator '{}' resumed here; asking its other nodes for "
           "what its ranks still need",
           comm.key);
  send_to_nodes(comm, m.SerializeAsString());
}

std::pair<uint32_t, uint32_t> ScaleOut::nodes_joined(const Communicator& comm) const {
  auto it = states_.find(comm.id);
  if (it == states_.end()) return {0, comm.layout ? comm.layout->nodes() : 1};
  const auto& joined = it->second.joined;
  return {static_cast<uint32_t>(std::count(joined.begin(), joined.end(), true)),
          static_cast<uint32_t>(joined.size())};
}

void ScaleOut::note_join(Communicator& comm, uint32_t node) {
  auto it = states_.find(comm.id);
  if (it == states_.end() || node >= it->second.joined.size() || node == comm.layout->my_node)
    return;
  if (!it->second.joined[node])
    log_.log(spdlog::level::info, comm.uid, TenantLogKind::kCommunicator,
             "scale-out: node {} joined communicator '{}'", node, comm.key);
  it->second.joined[node] = true;
}

void ScaleOut::send_to_nodes(Communicator& comm, const std::string& header) {
  const auto it = states_.find(comm.id);
  if (it == states_.end()) return;
  for (uint32_t n = 0; n < it->second.peers.size(); ++n)
    if (n != comm.layout->my_node)
      worker().send(it->second.peers[n], header, nullptr, 0, [](ErrorCode, const std::string&) {});
}

bool ScaleOut::poll() {
  if (!shared_.worker_) return false;
  const bool worked = shared_.worker_->progress();
  const bool tended = liveness_.tend_nodes(false);
  return liveness_.apply_parked_breaks() || tended || worked;
}

void ScaleOut::broke_here(Communicator& comm, const std::string& why) {
  if (shared_.stopping)
    return;  // its ranks resume with the next irisd: the other nodes hold this one
  v1::NodeMessage m = envelope(comm);
  m.mutable_broken()->set_why(why);
  if (auto it = states_.find(comm.id); it != states_.end()) {
    for (uint32_t r = 0; r < comm.nranks; ++r) {
      if (!comm.is_local(r)) continue;
      m.mutable_broken()->add_ranks(r);
      m.mutable_broken()->add_arrivals(it->second.sent[r]);
    }
  }
  send_to_nodes(comm, m.SerializeAsString());
}

void ScaleOut::retired(Communicator& comm, uint64_t seq) {
  // Stopping, collectives fail only because the sessions end here: their ranks resume them.
  if (!keeping() || shared_.stopping) return;
  auto it = states_.find(comm.id);
  if (it == states_.end()) return;
  it->second.retired.push_back(seq);
  it->second.retired_here.insert(seq);
  tend_ = true;
}

void ScaleOut::forget(const Communicator& comm) {
  states_.erase(comm.id);
  // Stopping, the ranks resume with the next irisd, which needs what moved.
  if (!shared_.stopping) shared_.book.forget(comm.key, comm.layout->secret);
  auto [first, last] = by_key_.equal_range(comm.key);
  for (auto k = first; k != last; ++k)
    if (k->second == comm.id) {
      by_key_.erase(k);
      break;
    }
}

Communicator* ScaleOut::authenticated(const std::string& key, const std::string& secret,
                                      uint32_t nranks) {
  auto [it, last] = by_key_.equal_range(key);
  while (it != last) {
    Communicator* comm = comms_.find(it->second);
    if (comm == nullptr || comm->key != key || !comm->layout) {
      it = by_key_.erase(it);  // gone since
      continue;
    }
    if (comm->nranks == nranks && same_secret(comm->layout->secret, secret)) return comm;
    ++it;
  }
  return nullptr;
}

void ScaleOut::on_message(std::string_view header, UcxWorker::Payload& payload) {
  v1::NodeMessage m;
  if (header.size() > kMaxHeaderBytes ||
      !m.ParseFromArray(header.data(), static_cast<int>(header.size()))) {
    warn("dropped a malformed message from another node ({} header bytes)", header.size());
    return;
  }
  Communicator* comm = authenticated(m.key(), m.secret(), m.nranks());
  if (comm == nullptr) {
    if (m.has_join()) {
      // The job's rank here may not have joined yet: keep it for then (bounded; oldest first).
      if (pending_joins_.size() >= kMaxPendingJoins) pending_joins_.pop_front();
      pending_joins_.push_back({m.key(), m.secret(), m.nranks(), m.join().node()});
      return;
    }
    warn("dropped a message for communicator '{}': none here with that secret and size",
         m.key().substr(0, 64));
    return;
  }
  auto state_it = states_.find(comm->id);
  if (state_it == states_.end()) return;
  CommState& state = state_it->second;
  const uint32_t nodes = comm->layout->nodes();
  switch (m.kind_case()) {
    case v1::NodeMessage::kJoin: {
      const uint32_t node = m.join().node();
      note_join(*comm, node);
      // A node this resumed one waits for answers its rejoin.
      if (node < nodes && node != comm->layout->my_node && state.away_until[node])
        restarts_.answered(*comm, state, node);
      break;
    }
    case v1::NodeMessage::kBroken: {
      const v1::NodeBroken& b = m.broken();
      ParkedBreak parked{
          comm->id,
          comm->key,
          "on another node of communicator '" + comm->key + "': " + b.why().substr(0, 1024),
          {},
          std::chrono::steady_clock::now() + std::chrono::seconds(5)};
      for (int i = 0; i < std::min(b.ranks_size(), b.arrivals_size()); ++i)
        if (b.ranks(i) < comm->nranks && !comm->is_local(b.ranks(i)))
          parked.arrivals.emplace_back(b.ranks(i), b.arrivals(i));
      liveness_.park(std::move(parked));
      liveness_.apply_parked_breaks();
      break;
    }
    case v1::NodeMessage::kArrival:
      receiver_.handle_arrival(*comm, state, m.arrival(), payload);
      break;
    case v1::NodeMessage::kDone: {
      const v1::NodeDone& done = m.done();
      if (done.node() >= nodes || done.node() == comm->layout->my_node) break;
      for (int i = 0; i < std::min(done.seqs_size(), kMaxSeqsPerDone); ++i)
        state.kept.release(done.node(), done.seqs(i));
      break;
    }
    case v1::NodeMessage::kRejoin:
      restarts_.handle_rejoin(*comm, state, m.rejoin());
      break;
    default:
      warn("dropped a message of unknown kind for communicator '{}'", comm->key);
  }
}

}  // namespace iris::daemon
