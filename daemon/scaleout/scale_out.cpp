#include "daemon/scaleout/scale_out.hpp"

#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>

#include "iris/error.hpp"
#include "iris/shared/collective_shape.hpp"
#include "iris/v1/scaleout.pb.h"

namespace iris::daemon {

namespace {
constexpr std::size_t kMaxHeaderBytes = 64 * 1024;
constexpr std::size_t kMaxPendingJoins = 1024;
constexpr std::size_t kMaxAddressBytes = 64 * 1024;
constexpr uint32_t kMaxNodes = 4096;
// Connections one irisd keeps to other nodes' daemons, over all communicators: what a tenant
// passing ever new addresses could otherwise grow without end.
constexpr std::size_t kMaxPeers = 16384;

// Compares secrets without an early exit (no timing hint of how much matched).
bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

v1::NodeMessage envelope(const Communicator& comm) {
  v1::NodeMessage m;
  m.set_key(comm.key);
  m.set_secret(comm.layout->secret);
  m.set_nranks(comm.nranks);
  return m;
}

// Collectives of one rank that a rejoining node may say completed there and never reached this
// node, looked at per rank (bounds the work a forged rejoin can cause).
constexpr uint64_t kMaxLostScan = 4096;
// Collectives a rank may arrive at out of order ahead of the oldest one not heard of yet.
constexpr std::size_t kMaxHeardAhead = 65536;
constexpr int kMaxSeqsPerDone = 512;
// Retired collectives told to the other nodes in one NodeDone while collectives flow.
constexpr std::size_t kDoneBatch = 32;
// Host data up to this size is copied for keeping on the progress thread, not the engine.
constexpr uint64_t kCopiedHereBytes = 64 * 1024;
// A node a resumed communicator could not connect to (UcxWorker::failed says so for it).
constexpr UcxWorker::PeerId kNoPeer = UINT32_MAX;
}  // namespace

template <typename... Args>
void ScaleOut::warn(fmt::format_string<Args...> format, Args&&... args) {
  scheduler_.log().warn(TenantLog::kOtherNodes, TenantLogKind::kScaleOut, "scale-out: {}",
                        fmt::format(format, std::forward<Args>(args)...));
}

ScaleOut::ScaleOut(const Config& config, CollectiveScheduler& scheduler,
                   CommunicatorRegistry& comms, Engine& engine, ProgressLoop& loop)
    : config_(config),
      scheduler_(scheduler),
      comms_(comms),
      loop_(loop),
      staging_(engine, kStagingCachedBytes),
      book_(config.socket_path + ".nodes") {
  scheduler_.set_remote_nodes(this);
}

ScaleOut::~ScaleOut() {
  scheduler_.set_remote_nodes(nullptr);
  if (worker_) loop_.unwatch(worker_->event_fd());
}

UcxWorker& ScaleOut::worker() {
  if (!config_.scale_out)
    throw Error(ErrorCode::kUnavailable,
                "this irisd runs with --no-scale-out: communicators across nodes are off here "
                "(ask the operator)");
  if (!worker_) {
    worker_ = std::make_unique<UcxWorker>(*this, config_.scale_out_interface);
    loop_.watch(worker_->event_fd());
    spdlog::info("scale-out: UCX worker started ({} byte address)", worker_->address().size());
  }
  return *worker_;
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
    book_.update(key, secret, addresses);
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
  scheduler_.log().log(spdlog::level::info, comm.uid, TenantLogKind::kCommunicator,
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
    scheduler_.log().log(spdlog::level::info, comm.uid, TenantLogKind::kCommunicator,
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
  if (!worker_) return false;
  const bool worked = worker_->progress();
  const bool tended = tend_nodes(false);
  return apply_parked_breaks() || tended || worked;
}

bool ScaleOut::tend_nodes(bool idle) {
  if (!tend_) return false;
  tend_ = false;
  bool worked = false;
  std::optional<std::chrono::steady_clock::time_point> now;  // read once, only with a node held
  std::vector<std::pair<uint64_t, std::string>> expired;
  for (auto& [id, state] : states_) {
    Communicator* comm = comms_.find(id);
    if (comm == nullptr || !comm->layout) continue;
    const uint32_t me = comm->layout->my_node;
    // Told in batches while collectives flow, and all before the loop sleeps.
    const bool tell = !state.retired.empty() && (idle || state.retired.size() >= kDoneBatch);
    if (!tell && !state.retired.empty()) tend_ = true;
    for (std::size_t first = 0; tell && first < state.retired.size(); first += kMaxSeqsPerDone) {
      v1::NodeMessage m = envelope(*comm);
      v1::NodeDone& done = *m.mutable_done();
      done.set_node(me);
      for (std::size_t i = first; i < std::min(state.retired.size(), first + kMaxSeqsPerDone); ++i)
        done.add_seqs(state.retired[i]);
      const std::string header = m.SerializeAsString();
      for (uint32_t n = 0; n < state.peers.size(); ++n)
        if (n != me && !state.away_until[n])
          worker().send(state.peers[n], header, nullptr, 0, [](ErrorCode, const std::string&) {});
      worked = true;
    }
    if (tell) state.retired.clear();
    for (uint32_t n = 0; n < state.away_until.size(); ++n) {
      if (!state.away_until[n]) continue;
      if (!now) now = std::chrono::steady_clock::now();
      if (*now < *state.away_until[n]) {
        tend_ = true;
        continue;
      }
      state.away_until[n].reset();
      expired.emplace_back(id, "node " + std::to_string(n) + "'s irisd of communicator '" +
                                   comm->key + "' went away (" + state.away_why[n] +
                                   ") and did not come back within " +
                                   std::to_string(config_.limits.resume_window_ms) +
                                   " ms (--resume-window-ms); create a new communicator once it "
                                   "is back");
    }
  }
  for (const auto& [id, why] : expired) {
    if (Communicator* comm = comms_.find(id)) {
      warn("{}", why);
      scheduler_.break_comm(*comm, ErrorCode::kPeerLost, why);
      worked = true;
    }
  }
  return worked;
}

// Parked breaks wait on arrivals or their deadline: the loop keeps turning meanwhile.
bool ScaleOut::try_enter_sleep() {
  if (tend_nodes(true)) return false;  // told what retired: poll once more
  return parked_breaks_.empty() && (!worker_ || worker_->arm());
}

bool ScaleOut::apply_parked_breaks() {
  bool applied = false;
  const auto now = std::chrono::steady_clock::now();
  for (auto it = parked_breaks_.begin(); it != parked_breaks_.end();) {
    Communicator* comm = comms_.find(it->comm_id);
    auto state = states_.find(it->comm_id);
    if (comm == nullptr || comm->key != it->key || state == states_.end()) {
      it = parked_breaks_.erase(it);
      continue;
    }
    bool all_in = true;
    for (const auto& [rank, sent] : it->arrivals)
      if (state->second.received[rank] < sent) all_in = false;
    if (!all_in && now < it->deadline) {
      ++it;
      continue;
    }
    scheduler_.break_comm(*comm, ErrorCode::kPeerLost, it->why, /*from_remote=*/true);
    it = parked_breaks_.erase(it);
    applied = true;
  }
  return applied;
}

std::optional<PlanError> ScaleOut::send_arrival(Communicator& comm, Collective& c, uint32_t rank) {
  const auto state_it = states_.find(comm.id);
  if (state_it == states_.end())
    return PlanError{ErrorCode::kInternal, "communicator '" + comm.key + "' has no node state"};
  CommState& state = state_it->second;
  const NodeLayout& layout = *comm.layout;
  const ArrivedRank& arrived = c.ranks.at(rank);
  std::optional<PlanError> problem;
  if (c.error != ErrorCode::kOk) {
    problem = PlanError{c.error, c.why};
  } else if (!arrived.request) {
    problem = PlanError{ErrorCode::kInvalidArgument, "its request was refused on its node"};
  } else if (auto missing = std::find(state.joined.begin(), state.joined.end(), false);
             missing != state.joined.end()) {
    problem = PlanError{ErrorCode::kUnavailable,
                        "node " + std::to_string(missing - state.joined.begin()) +
                            " has not joined communicator '" + comm.key +
                            "' yet (every rank's init must have returned first)"};
  }
  for (uint32_t n = 0; n < layout.nodes(); ++n) {
    if (n == layout.my_node) continue;
    v1::NodeMessage m = envelope(comm);
    v1::NodeArrival& a = *m.mutable_arrival();
    a.set_seq(c.seq);
    a.set_rank(rank);
    if (problem) {
      a.set_error_code(static_cast<uint32_t>(problem->code));
      a.set_why(problem->message);
      ++state.sent[rank];
      send_and_keep(comm.id, n, c.seq, rank, m.SerializeAsString(), nullptr, 0);
      continue;
    }
    const RankArgs& args = arrived.request->args;
    a.set_kind(static_cast<uint32_t>(args.kind));
    a.set_bytes(args.bytes);
    a.set_root(args.root);
    a.set_send_offset(args.send_offset);
    // The part of the send buffer node n's ranks need: one range, one transfer.
    uint64_t lo = UINT64_MAX, hi = 0;
    for (uint32_t d = 0; d < comm.nranks; ++d) {
      if (layout.node_of_rank[d] != n) continue;
      if (args.kind == CollectiveKind::kAllToAllV) {
        a.add_v_ranks(d);
        a.add_v_counts(args.send_counts[d]);
        a.add_v_displs(args.send_displs[d]);
      }
      if (auto block = source_block(args, rank, d)) {
        lo = std::min(lo, block->offset);
        hi = std::max(hi, block->offset + block->bytes);
      }
    }
    if (hi == 0) lo = 0;
    a.set_data_offset(lo);
    a.set_data_bytes(hi - lo);
    const uint64_t cookie = scheduler_.begin_network(comm, c, rank);
    ++state.sent[rank];
    const std::shared_ptr<MappedBuffer>& from = arrived.request->send;
    if (hi == lo) {
      send_and_keep(comm.id, n, c.seq, rank, m.SerializeAsString(), nullptr, cookie);
      continue;
    }
    if (from->device == kHostMemory && !keeping()) {
      worker().send(state.peers[n], m.SerializeAsString(), from->base + lo, hi - lo,
                    [this, cookie](ErrorCode code, const std::string& why) {
                      scheduler_.end_network(cookie, code, why);
                    });
      continue;
    }
    // GPU memory goes through pinned host memory, which UCX sends. With a resume window, host
    // memory is copied too (what this node keeps for node n, KeptArrivals), but sent from the
    // rank's buffer meanwhile, so the copy adds no latency.
    std::shared_ptr<StagedData> staged;
    try {
      staged = staging_.take(hi - lo);
    } catch (const Error& e) {
      scheduler_.end_network(cookie, e.code(), e.message());
      continue;
    }
    const std::string header = m.SerializeAsString();
    if (from->device != kHostMemory) {
      scheduler_.stage_copy(
          CopyRequest{from->base + lo, staged->data, hi - lo, 0, from->device, kHostMemory, from,
                      staged},
          [this, comm_id = comm.id, n, seq = c.seq, rank, header, staged,
           cookie](ErrorCode code) mutable {
            if (code != ErrorCode::kOk)
              return scheduler_.end_network(
                  cookie, code, "copying its data into host memory failed on the copy engine");
            send_and_keep(comm_id, n, seq, rank, std::move(header), std::move(staged), cookie);
          });
      continue;
    }
    if (hi - lo <= kCopiedHereBytes) {
      // Small: copied here at once (the engine's round trip would cost more than the copy).
      std::memcpy(staged->data, from->base + lo, hi - lo);
      send_and_keep(comm.id, n, c.seq, rank, header, std::move(staged), cookie);
      continue;
    }
    // Whichever of the send and the copy ends second sends the copy, when the send did not reach
    // node n (it was away, or the transfer failed): a node that came back meanwhile still gets it.
    struct HostSend {
      bool sent = false;
      bool reached = false;
      bool copied = false;
    };
    auto progress = std::make_shared<HostSend>();
    const uint64_t copy_cookie = scheduler_.begin_network(comm, c, rank);
    scheduler_.stage_copy(
        CopyRequest{from->base + lo, staged->data, hi - lo, 0, from->device, kHostMemory, from,
                    staged},
        [this, comm_id = comm.id, n, seq = c.seq, rank, header, staged, copy_cookie,
         progress](ErrorCode code) {
          if (code != ErrorCode::kOk)
            return scheduler_.end_network(copy_cookie, code,
                                          "copying its data for another node failed on the engine");
          if (auto it = states_.find(comm_id); it != states_.end())
            it->second.kept.keep({n, seq, rank, header, staged});
          progress->copied = true;
          scheduler_.end_network(copy_cookie, ErrorCode::kOk, {});
          if (progress->sent && !progress->reached)
            send_or_hold(comm_id, n, header, staged->data, staged->bytes, staged, 0, {});
        });
    send_or_hold(comm.id, n, header, from->base + lo, hi - lo, from, cookie,
                 [this, comm_id = comm.id, n, header, staged, progress](bool reached) {
                   progress->sent = true;
                   progress->reached = reached;
                   if (!reached && progress->copied)
                     send_or_hold(comm_id, n, header, staged->data, staged->bytes, staged, 0, {});
                 });
  }
  return problem;
}

void ScaleOut::send_and_keep(uint64_t comm_id, uint32_t node, uint64_t seq, uint32_t rank,
                             std::string header, std::shared_ptr<StagedData> data,
                             uint64_t cookie) {
  if (keeping())
    if (auto it = states_.find(comm_id); it != states_.end())
      it->second.kept.keep({node, seq, rank, header, data});
  send_or_hold(comm_id, node, std::move(header), data ? data->data : nullptr,
               data ? data->bytes : 0, data, cookie, {});
}

void ScaleOut::send_or_hold(uint64_t comm_id, uint32_t node, std::string header, const void* bytes,
                            std::size_t size, std::shared_ptr<const void> owner, uint64_t cookie,
                            std::function<void(bool reached)> after) {
  auto end = [this, cookie, after](ErrorCode code, const std::string& why, bool reached) {
    if (cookie != 0) scheduler_.end_network(cookie, code, why);
    if (after) after(reached);
  };
  auto it = states_.find(comm_id);
  if (it == states_.end()) return end(ErrorCode::kPeerLost, "its communicator is gone", true);
  CommState& state = it->second;
  if (state.away_until[node]) return end(ErrorCode::kOk, {}, false);  // kept; sent when back
  const UcxWorker::PeerId peer = state.peers[node];
  const bool keep = keeping();
  worker().send(
      peer, std::move(header), bytes, size,
      [this, end, comm_id, node, peer, keep, owner](ErrorCode code, const std::string& why) {
        // A node the transfer failed to is held (its irisd may be restarting), and
        // what it missed is kept for it; a node that came back since is not.
        if (code == ErrorCode::kPeerLost && keep) {
          Communicator* comm = comms_.find(comm_id);
          auto state = states_.find(comm_id);
          if (comm != nullptr && state != states_.end() && state->second.peers[node] == peer)
            hold(*comm, state->second, node, "a transfer to it failed: " + why);
          return end(ErrorCode::kOk, {}, false);
        }
        end(code, why, true);
      });
}

void ScaleOut::broke_here(Communicator& comm, const std::string& why) {
  if (stopping_) return;  // its ranks resume with the next irisd: the other nodes hold this one
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
  if (!keeping() || stopping_) return;
  auto it = states_.find(comm.id);
  if (it == states_.end()) return;
  it->second.retired.push_back(seq);
  it->second.retired_here.insert(seq);
  tend_ = true;
}

void ScaleOut::forget(const Communicator& comm) {
  states_.erase(comm.id);
  // Stopping, the ranks resume with the next irisd, which needs what moved.
  if (!stopping_) book_.forget(comm.key, comm.layout->secret);
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
        answered(*comm, state, node);
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
      parked_breaks_.push_back(std::move(parked));
      apply_parked_breaks();
      break;
    }
    case v1::NodeMessage::kArrival:
      handle_arrival(*comm, state, m.arrival(), payload);
      break;
    case v1::NodeMessage::kDone: {
      const v1::NodeDone& done = m.done();
      if (done.node() >= nodes || done.node() == comm->layout->my_node) break;
      for (int i = 0; i < std::min(done.seqs_size(), kMaxSeqsPerDone); ++i)
        state.kept.release(done.node(), done.seqs(i));
      break;
    }
    case v1::NodeMessage::kRejoin:
      handle_rejoin(*comm, state, m.rejoin());
      break;
    default:
      warn("dropped a message of unknown kind for communicator '{}'", comm->key);
  }
}

void ScaleOut::handle_rejoin(Communicator& comm, CommState& state, const v1::NodeRejoin& rejoin) {
  const NodeLayout& layout = *comm.layout;
  const uint32_t n = rejoin.node();
  if (n >= layout.nodes() || n == layout.my_node || rejoin.address().empty() ||
      rejoin.address().size() > kMaxAddressBytes) {
    warn(
        "communicator '{}': dropped a rejoin naming node {} (not another node of it, or no "
        "address)",
        comm.key, n);
    return;
  }
  // What each of its ranks completed under its previous irisd.
  std::map<uint32_t, const v1::ResumedRank*> ranks;
  for (const v1::ResumedRank& r : rejoin.ranks()) {
    if (r.rank() >= comm.nranks || layout.node_of_rank[r.rank()] != n ||
        r.completed_seqs_size() > 1024) {
      warn(
          "communicator '{}': dropped node {}'s rejoin (rank {} is not its, or names too many "
          "collectives)",
          comm.key, n, r.rank());
      return;
    }
    ranks[r.rank()] = &r;
  }
  auto completed_by = [&](uint32_t rank, uint64_t seq) {
    auto it = ranks.find(rank);
    if (it == ranks.end()) return false;
    const v1::ResumedRank& r = *it->second;
    return seq < r.resume_seq() || std::find(r.completed_seqs().begin(), r.completed_seqs().end(),
                                             seq) != r.completed_seqs().end();
  };
  auto completed_there = [&](uint64_t seq) {
    for (uint32_t r = 0; r < comm.nranks; ++r)
      if (layout.node_of_rank[r] == n && !completed_by(r, seq)) return false;
    return true;
  };
  UcxWorker::PeerId peer;
  try {
    peer = worker().connect(rejoin.address());
  } catch (const Error& e) {
    warn("communicator '{}': node {} came back at an address UCX cannot use: {}", comm.key, n,
         e.message());
    return;
  }
  state.peers[n] = peer;
  state.joined[n] = true;
  state.away_until[n].reset();
  book_.learned(comm.key, layout.secret, n, rejoin.address());
  // Arrivals from its previous irisd still landing will not be used: its ranks send them again.
  ++state.epoch[n];
  for (auto it = state.landing.begin(); it != state.landing.end();) {
    if (layout.node_of_rank[it->first] == n) {
      state.heard[it->first].erase(it->second);
      it = state.landing.erase(it);
    } else {
      ++it;
    }
  }
  const std::optional<std::size_t> sent = send_again(comm, state, n, completed_there);
  if (!sent) return;
  scheduler_.log().log(spdlog::level::info, comm.uid, TenantLogKind::kCommunicator,
                       "scale-out: node {} of communicator '{}' came back after its irisd "
                       "restarted; sending it again {} arrivals its ranks still need",
                       n, comm.key, *sent);
  // A rank that completed a collective there whose arrival never came here: its data went down
  // with that irisd (between leaving it and reaching this node), and nobody can send it again.
  // After a restart here, every rank of this node completed what came before its own first
  // collective here: nothing before the earliest of those is needed.
  uint64_t needed_from = 1;
  if (comm.resumed) {
    needed_from = UINT64_MAX;
    for (uint32_t r = 0; r < comm.nranks; ++r)
      if (comm.is_local(r)) needed_from = std::min(needed_from, comm.resumed_from[r]);
  }
  for (const auto& [rank, r] : ranks) {
    SeqSet& heard = state.heard[rank];
    std::vector<uint64_t> candidates;
    for (uint64_t seq = std::max(heard.below(), needed_from);
         seq < r->resume_seq() && candidates.size() < kMaxLostScan; ++seq)
      candidates.push_back(seq);
    candidates.insert(candidates.end(), r->completed_seqs().begin(), r->completed_seqs().end());
    for (uint64_t seq : candidates) {
      if (seq == 0 || heard.contains(seq) || state.retired_here.contains(seq) ||
          comm.all_local_done_before_restart(seq))
        continue;
      heard.insert(seq);
      ++state.received[rank];
      scheduler_.arrive_remote(comm, rank, seq, std::nullopt, ErrorCode::kPeerLost,
                               "it completed on its node, whose irisd then died before the "
                               "rank's data reached this node: nothing can send it again");
    }
  }
  v1::NodeMessage answer = envelope(comm);
  answer.mutable_join()->set_node(layout.my_node);
  worker().send(peer, answer.SerializeAsString(), nullptr, 0, [](ErrorCode, const std::string&) {});
}

void ScaleOut::answered(Communicator& comm, CommState& state, uint32_t node) {
  state.away_until[node].reset();
  const std::optional<std::size_t> sent =
      send_again(comm, state, node, [](uint64_t) { return false; });
  if (!sent) return;
  scheduler_.log().log(spdlog::level::info, comm.uid, TenantLogKind::kCommunicator,
                       "scale-out: node {} of resumed communicator '{}' answered; sending it {} "
                       "arrivals held meanwhile",
                       node, comm.key, *sent);
}

std::optional<std::size_t> ScaleOut::send_again(Communicator& comm, CommState& state, uint32_t node,
                                                const std::function<bool(uint64_t)>& completed) {
  std::optional<uint64_t> lost;
  std::vector<KeptArrivals::Arrival> again = state.kept.to_send_again(node, completed, lost);
  if (lost) {
    scheduler_.break_comm(
        comm, ErrorCode::kPeerLost,
        "node " + std::to_string(node) + " of communicator '" + comm.key + "' needs " +
            (*lost == 0 ? std::string("collectives") : "collective " + std::to_string(*lost)) +
            " again after a restart, but this node no longer kept what it "
            "sent there (over --resume-keep-bytes); create a new communicator "
            "to go on");
    return std::nullopt;
  }
  for (KeptArrivals::Arrival& a : again)
    worker().send(state.peers[node], std::move(a.header), a.data ? a.data->data : nullptr,
                  a.data ? a.data->bytes : 0, [data = a.data](ErrorCode, const std::string&) {});
  return again.size();
}

void ScaleOut::handle_arrival(Communicator& comm, CommState& state, const v1::NodeArrival& a,
                              UcxWorker::Payload& payload) {
  const uint32_t rank = a.rank();
  if (rank >= comm.nranks || comm.is_local(rank) || a.seq() == 0) {
    warn("communicator '{}': dropped an arrival of rank {} seq {} (not another node's rank)",
         comm.key, rank, a.seq());
    return;
  }
  SeqSet& heard = state.heard[rank];
  if (heard.contains(a.seq()) || comm.all_local_done_before_restart(a.seq())) {
    // Sent again after a restart (of that node's irisd or this one's): heard of already, or no
    // rank here needs it any more. Its data is taken (a refused one would fail the sender's
    // send) and dropped; a collective already retired here is told again (NodeDone).
    if (comm.all_local_done_before_restart(a.seq()) || state.retired_here.contains(a.seq())) {
      state.retired.push_back(a.seq());
      tend_ = true;
    }
    if (payload.bytes() > 0 && payload.bytes() <= config_.limits.max_buffer_bytes) {
      auto sink = std::make_shared<std::vector<std::byte>>(payload.bytes());
      payload.receive_into(sink->data(), [sink](ErrorCode, const std::string&) {});
    }
    return;
  }
  if (heard.above() >= kMaxHeardAhead) {
    warn(
        "communicator '{}': dropped rank {}'s arrival at seq {}: {} of its collectives came "
        "before one it has not arrived at yet",
        comm.key, rank, a.seq(), heard.above());
    return;
  }
  heard.insert(a.seq());
  // Counted when it reaches the scheduler: a parked break waits for it (ParkedBreak).
  auto count_received = [this, id = comm.id, rank] {
    if (auto state = states_.find(id); state != states_.end()) ++state->second.received[rank];
  };
  if (a.error_code() != 0) {
    count_received();
    const auto code = a.error_code() <= static_cast<uint32_t>(ErrorCode::kEngineError)
                          ? static_cast<ErrorCode>(a.error_code())
                          : ErrorCode::kInternal;
    scheduler_.arrive_remote(comm, rank, a.seq(), std::nullopt, code,
                             "on its node: " + a.why().substr(0, 1024));
    return;
  }
  auto refuse = [&](const std::string& why) {
    count_received();
    scheduler_.arrive_remote(comm, rank, a.seq(), std::nullopt, ErrorCode::kInvalidArgument,
                             "its node sent " + why);
  };
  if (shm::shape_of(a.kind()) == nullptr)
    return refuse("an unknown collective " + std::to_string(a.kind()));
  RankArgs args;
  args.kind = static_cast<CollectiveKind>(a.kind());
  args.bytes = a.bytes();
  args.root = a.root();
  if (args.root >= comm.nranks) return refuse("root " + std::to_string(args.root));
  if (a.data_bytes() != payload.bytes() || a.data_bytes() > config_.limits.max_buffer_bytes)
    return refuse(std::to_string(payload.bytes()) + " bytes of data, announced " +
                  std::to_string(a.data_bytes()) + " (at most max_buffer_bytes)");
  // Offsets relative to the data that came: the range [data_offset, +data_bytes) of the rank's
  // send buffer (wrapping arithmetic; the scheduler checks each copy against what came).
  args.send_offset = a.send_offset() - a.data_offset();
  if (args.kind == CollectiveKind::kAllToAllV) {
    if (a.v_ranks_size() != a.v_counts_size() || a.v_ranks_size() != a.v_displs_size())
      return refuse("torn all-to-all-v lists");
    args.send_counts.assign(comm.nranks, 0);
    args.send_displs.assign(comm.nranks, 0);
    for (int i = 0; i < a.v_ranks_size(); ++i) {
      const uint32_t d = a.v_ranks(i);
      if (d >= comm.nranks || !comm.is_local(d))
        return refuse("all-to-all-v counts for rank " + std::to_string(d));
      args.send_counts[d] = a.v_counts(i);
      args.send_displs[d] = a.v_displs(i);
    }
  }
  std::shared_ptr<StagedData> staged;
  try {
    staged = staging_.take(a.data_bytes());
  } catch (const Error& e) {
    count_received();
    scheduler_.arrive_remote(comm, rank, a.seq(), std::nullopt, e.code(),
                             "its data could not be staged here: " + e.message());
    return;
  }
  auto buffer = std::make_shared<MappedBuffer>(
      MappedBuffer{0, 0, staged->data, staged->bytes, staged, kHostMemory});
  const uint64_t comm_id = comm.id;
  const std::string key = comm.key;
  const uint64_t seq = a.seq();
  const uint32_t node = comm.layout->node_of_rank[rank];
  const uint64_t epoch = state.epoch[node];
  state.landing.emplace(rank, seq);
  auto arrive = [this, comm_id, key, rank, seq, node, epoch, args = std::move(args), buffer,
                 count_received](ErrorCode code, const std::string& why) mutable {
    Communicator* c = comms_.find(comm_id);
    if (c == nullptr || c->key != key) return;  // left meanwhile
    auto state = states_.find(comm_id);
    if (state != states_.end()) {
      // Its node came back since: it sends this arrival again (handle_rejoin).
      if (state->second.epoch[node] != epoch) return;
      state->second.landing.erase({rank, seq});
    }
    if (code != ErrorCode::kOk && keeping() && state != states_.end()) {
      // Its node's irisd likely died mid-transfer: held, and the arrival comes again when the
      // node is back (or the communicator fails at the end of the window).
      state->second.heard[rank].erase(seq);
      hold(*c, state->second, node,
           "rank " + std::to_string(rank) + "'s data did not arrive: " + why);
      return;
    }
    count_received();
    if (code != ErrorCode::kOk) {
      scheduler_.arrive_remote(*c, rank, seq, std::nullopt, code,
                               "its data did not arrive (" + why + ")");
      return;
    }
    scheduler_.arrive_remote(*c, rank, seq, ValidatedRequest{std::move(args), buffer, nullptr});
  };
  payload.receive_into(staged->data, std::move(arrive));
}

void ScaleOut::on_peer_failed(UcxWorker::PeerId peer, const std::string& why) {
  std::vector<std::pair<uint64_t, uint32_t>> affected;  // (communicator, node)
  for (auto it = states_.begin(); it != states_.end();) {
    const Communicator* comm = comms_.find(it->first);
    if (comm == nullptr || !comm->layout) {
      it = states_.erase(it);  // gone since
      continue;
    }
    for (uint32_t n = 0; n < it->second.peers.size(); ++n)
      if (n != comm->layout->my_node && it->second.peers[n] == peer) {
        affected.emplace_back(it->first, n);
        break;
      }
    ++it;
  }
  for (const auto& [id, node] : affected) {
    Communicator* comm = comms_.find(id);
    if (!keeping()) {
      scheduler_.break_comm(*comm, ErrorCode::kPeerLost,
                            "another node's irisd of communicator '" + comm->key +
                                "' is unreachable (" + why +
                                "); create a new communicator once it is back");
      continue;
    }
    hold(*comm, states_.at(id), node, why);
  }
}

void ScaleOut::hold(const Communicator& comm, CommState& state, uint32_t node,
                    const std::string& why) {
  // Its irisd may be restarting: held for the resume window (tend_nodes), what it misses kept.
  if (state.away_until[node]) return;
  state.away_until[node] =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(config_.limits.resume_window_ms);
  state.away_why[node] = why;
  tend_ = true;
  warn(
      "node {} of communicator '{}' is unreachable ({}): holding it for up to {} ms while its "
      "irisd restarts",
      node, comm.key, why, config_.limits.resume_window_ms);
}

}  // namespace iris::daemon
