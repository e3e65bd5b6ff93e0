// NodeLiveness: the other nodes' liveness: which are away (UCX reported their endpoint failed, or a
// transfer to them failed), holding them for the resume window, breaking the communicators they do
// not come back to, and the breaks parked until the arrivals they wait for came.
#include <algorithm>
#include <cstring>

#include "daemon/scaleout/scale_out_internal.hpp"
#include "iris/error.hpp"
#include "iris/shared/collective_shape.hpp"

namespace iris::daemon {

using namespace scale_out_limits;

bool NodeLiveness::tend_nodes(bool idle) {
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

bool NodeLiveness::apply_parked_breaks() {
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

void NodeLiveness::peer_failed(UcxWorker::PeerId peer, const std::string& why) {
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

void NodeLiveness::hold(const Communicator& comm, CommState& state, uint32_t node,
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
