#include "daemon/scaleout/scale_out.hpp"

#include <algorithm>
#include <cstdlib>
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

// Host memory holding one node's data for another, pinned for the engine (whole pages: what
// the GPU runtimes pin). Throws iris::Error when it cannot be had.
struct StagedData {
  StagedData(Engine& engine, uint64_t n) : bytes(n) {
    constexpr uint64_t kPage = 4096;
    const uint64_t size = std::max<uint64_t>(kPage, (n + kPage - 1) / kPage * kPage);
    data = static_cast<std::byte*>(std::aligned_alloc(kPage, size));
    if (data == nullptr)
      throw Error(ErrorCode::kLimitExceeded, "cannot allocate " + std::to_string(size) +
                                                 " bytes to stage another node's data");
    try {
      pin = engine.prepare_host_memory(data, size);
    } catch (...) {
      std::free(data);
      throw;
    }
  }
  ~StagedData() {
    pin.reset();  // unpinned before it is freed
    std::free(data);
  }
  StagedData(const StagedData&) = delete;
  StagedData& operator=(const StagedData&) = delete;
  uint64_t bytes;
  std::byte* data = nullptr;
  std::shared_ptr<void> pin;
};
}  // namespace

template <typename... Args>
void ScaleOut::warn(fmt::format_string<Args...> format, Args&&... args) {
  scheduler_.log().warn(TenantLog::kOtherNodes, TenantLogKind::kScaleOut, "scale-out: {}",
                        fmt::format(format, std::forward<Args>(args)...));
}

ScaleOut::ScaleOut(const Config& config, CollectiveScheduler& scheduler,
                   CommunicatorRegistry& comms, Engine& engine, ProgressLoop& loop)
    : config_(config), scheduler_(scheduler), comms_(comms), engine_(engine), loop_(loop) {
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

std::shared_ptr<const NodeLayout> ScaleOut::check_layout(std::vector<std::string> addresses,
                                                         std::vector<uint32_t> node_of_rank,
                                                         std::string secret, uint32_t nranks,
                                                         uint32_t rank) {
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
  for (uint32_t n = 0; n < addresses.size(); ++n) {
    if (addresses[n].empty() || addresses[n].size() > kMaxAddressBytes)
      bad("node " + std::to_string(n) + "'s address is empty or too long");
    for (uint32_t m = 0; m < n; ++m)
      if (addresses[m] == addresses[n])
        bad("nodes " + std::to_string(m) + " and " + std::to_string(n) + " have the same address");
    if (addresses[n] == mine) my_node = n;
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
  auto layout = std::make_shared<NodeLayout>();
  layout->addresses = std::move(addresses);
  layout->node_of_rank = std::move(node_of_rank);
  layout->my_node = *my_node;
  layout->secret = std::move(secret);
  return layout;
}

void ScaleOut::joined(Communicator& comm) {
  if (states_.count(comm.id) != 0) return;
  const NodeLayout& layout = *comm.layout;
  CommState state;
  state.peers.resize(layout.nodes());
  state.joined.assign(layout.nodes(), false);
  state.sent.assign(comm.nranks, 0);
  state.received.assign(comm.nranks, 0);
  state.joined[layout.my_node] = true;
  for (uint32_t n = 0; n < layout.nodes(); ++n)
    if (n != layout.my_node) state.peers[n] = worker().connect(layout.addresses[n]);
  states_.emplace(comm.id, std::move(state));
  by_key_[comm.key] = comm.id;
  // Joins that came before this node's first rank.
  for (auto it = pending_joins_.begin(); it != pending_joins_.end();) {
    if (it->key == comm.key && it->nranks == comm.nranks &&
        same_secret(it->secret, layout.secret)) {
      note_join(comm, it->node);
      it = pending_joins_.erase(it);
    } else {
      ++it;
    }
  }
  v1::NodeMessage m = envelope(comm);
  m.mutable_join()->set_node(layout.my_node);
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
  const bool worked = worker_ && worker_->progress();
  return apply_parked_breaks() || worked;
}

// Parked breaks wait on arrivals or their deadline: the loop keeps turning meanwhile.
bool ScaleOut::try_enter_sleep() { return parked_breaks_.empty() && (!worker_ || worker_->arm()); }

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
      ++state_it->second.sent[rank];
      worker().send(state.peers[n], m.SerializeAsString(), nullptr, 0,
                    [](ErrorCode, const std::string&) {});
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
    ++state_it->second.sent[rank];
    auto sent = [this, cookie](ErrorCode code, const std::string& why) {
      scheduler_.end_network(cookie, code, why);
    };
    const std::shared_ptr<MappedBuffer>& from = arrived.request->send;
    if (hi == lo || from->device == kHostMemory) {
      worker().send(state.peers[n], m.SerializeAsString(), hi > lo ? from->base + lo : nullptr,
                    hi - lo, std::move(sent));
      continue;
    }
    // GPU memory: the copy engines stage it into pinned host memory, which UCX sends.
    std::shared_ptr<StagedData> staged;
    try {
      staged = std::make_shared<StagedData>(engine_, hi - lo);
    } catch (const Error& e) {
      sent(e.code(), e.message());
      continue;
    }
    scheduler_.stage_copy(
        CopyRequest{from->base + lo, staged->data, hi - lo, 0, from->device, kHostMemory, from,
                    staged},
        [this, peer = state.peers[n], header = m.SerializeAsString(), staged,
         sent = std::move(sent)](ErrorCode code) mutable {
          if (code != ErrorCode::kOk)
            return sent(code, "copying its GPU data into host memory failed on the copy engine");
          worker().send(peer, std::move(header), staged->data, staged->bytes,
                        [staged, sent = std::move(sent)](ErrorCode c, const std::string& why) {
                          sent(c, why);
                        });
        });
  }
  return problem;
}

void ScaleOut::broke_here(Communicator& comm, const std::string& why) {
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

Communicator* ScaleOut::authenticated(const std::string& key, const std::string& secret,
                                      uint32_t nranks) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return nullptr;
  Communicator* comm = comms_.find(it->second);
  if (comm == nullptr || comm->key != key || !comm->layout) {
    by_key_.erase(it);  // gone since
    return nullptr;
  }
  if (comm->nranks != nranks || !same_secret(comm->layout->secret, secret)) return nullptr;
  return comm;
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
    if (m.has_join() && by_key_.count(m.key()) == 0) {
      // The job's rank here may not have joined yet: keep it for then (bounded; oldest first).
      if (pending_joins_.size() >= kMaxPendingJoins) pending_joins_.pop_front();
      pending_joins_.push_back({m.key(), m.secret(), m.nranks(), m.join().node()});
      return;
    }
    warn("dropped a message for communicator '{}': none here with that secret and size",
         m.key().substr(0, 64));
    return;
  }
  switch (m.kind_case()) {
    case v1::NodeMessage::kJoin:
      note_join(*comm, m.join().node());
      break;
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
      handle_arrival(*comm, m.arrival(), payload);
      break;
    default:
      warn("dropped a message of unknown kind for communicator '{}'", comm->key);
  }
}

void ScaleOut::handle_arrival(Communicator& comm, const v1::NodeArrival& a,
                              UcxWorker::Payload& payload) {
  const uint32_t rank = a.rank();
  if (rank >= comm.nranks || comm.is_local(rank) || a.seq() == 0) {
    warn("communicator '{}': dropped an arrival of rank {} seq {} (not another node's rank)",
         comm.key, rank, a.seq());
    return;
  }
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
    staged = std::make_shared<StagedData>(engine_, a.data_bytes());
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
  auto arrive = [this, comm_id, key, rank, seq, args = std::move(args), buffer, count_received](
                    ErrorCode code, const std::string& why) mutable {
    Communicator* c = comms_.find(comm_id);
    if (c == nullptr || c->key != key) return;  // left meanwhile
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
  std::vector<uint64_t> affected;
  for (auto it = states_.begin(); it != states_.end();) {
    const Communicator* comm = comms_.find(it->first);
    if (comm == nullptr || !comm->layout) {
      it = states_.erase(it);  // gone since
      continue;
    }
    for (uint32_t n = 0; n < it->second.peers.size(); ++n)
      if (n != comm->layout->my_node && it->second.peers[n] == peer) {
        affected.push_back(it->first);
        break;
      }
    ++it;
  }
  for (uint64_t id : affected) {
    Communicator* comm = comms_.find(id);
    scheduler_.break_comm(*comm, ErrorCode::kPeerLost,
                          "another node's irisd of communicator '" + comm->key +
                              "' is unreachable (" + why +
                              "); create a new communicator once it is back");
  }
}

}  // namespace iris::daemon
