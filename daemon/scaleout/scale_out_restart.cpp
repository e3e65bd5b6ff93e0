// NodeRestarts: restarts across nodes: a restarted node's rejoin (its new address, what its ranks
// completed), the answer that ends holding it, and sending again the kept arrivals its ranks still
// need.
#include <algorithm>
#include <cstring>

#include "daemon/scaleout/scale_out_internal.hpp"
#include "iris/error.hpp"
#include "iris/shared/collective_shape.hpp"

namespace iris::daemon {

using namespace scale_out_limits;

void NodeRestarts::handle_rejoin(Communicator& comm, CommState& state,
                                 const v1::NodeRejoin& rejoin) {
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
  shared_.book.learned(comm.key, layout.secret, n, rejoin.address());
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
  log_.log(spdlog::level::info, comm.uid, TenantLogKind::kCommunicator,
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
      log_.warn(comm.uid, TenantLogKind::kCommunicator,
                "scale-out: communicator '{}': rank {} completed collective {} on node {}, "
                "whose irisd died before the rank's data reached this node (the eager window: a "
                "small block sent and lost with that irisd); failing it as peer_lost",
                comm.key, rank, seq, n);
      scheduler_.arrive_remote(comm, rank, seq, std::nullopt, ErrorCode::kPeerLost,
                               "it completed on its node, whose irisd then died before the "
                               "rank's data reached this node: nothing can send it again");
    }
  }
  v1::NodeMessage answer = envelope(comm);
  answer.mutable_join()->set_node(layout.my_node);
  worker().send(peer, answer.SerializeAsString(), nullptr, 0, [](ErrorCode, const std::string&) {});
}

void NodeRestarts::answered(Communicator& comm, CommState& state, uint32_t node) {
  state.away_until[node].reset();
  const std::optional<std::size_t> sent =
      send_again(comm, state, node, [](uint64_t) { return false; });
  if (!sent) return;
  log_.log(spdlog::level::info, comm.uid, TenantLogKind::kCommunicator,
           "scale-out: node {} of resumed communicator '{}' answered; sending it {} "
           "arrivals held meanwhile",
           node, comm.key, *sent);
}

std::optional<std::size_t> NodeRestarts::send_again(
    Communicator& comm, CommState& state, uint32_t node,
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

}  // namespace iris::daemon
