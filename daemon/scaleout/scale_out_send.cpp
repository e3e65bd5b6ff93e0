// ArrivalSender: a local rank's arrival to the other nodes of its communicator (what the scheduler
// hands ScaleOut for each arrival, with the rank's NetworkHold): which bytes each node needs, from
// GPU memory through a staging copy or from host memory directly, with a copy kept for a restart of
// that node (KeptArrivals), or held while the node is away.
#include <algorithm>
#include <cstring>

#include "daemon/scaleout/scale_out_internal.hpp"
#include "iris/error.hpp"
#include "iris/shared/collective_shape.hpp"

namespace iris::daemon {

using namespace scale_out_limits;

std::optional<PlanError> ArrivalSender::send_arrival(Communicator& comm, Collective& c,
                                                     uint32_t rank, const NetworkHold& hold) {
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
      send_and_keep(comm.id, n, c.seq, rank, m.SerializeAsString(), nullptr, {});
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
    ++state.sent[rank];
    send_block({comm.id, n, c.seq, rank, m.SerializeAsString()}, arrived.request->send, lo, hi - lo,
               hold);
  }
  return problem;
}

void ArrivalSender::send_block(const OutgoingArrival& out,
                               const std::shared_ptr<MappedBuffer>& from, uint64_t offset,
                               uint64_t bytes, const NetworkHold& hold) {
  NetworkHold part = hold.split();
  if (bytes == 0)
    return send_and_keep(out.comm_id, out.node, out.seq, out.rank, out.header, nullptr, part);
  if (from->device == kHostMemory && !keeping()) {
    // Host memory and nothing to keep: UCX sends from the rank's buffer.
    const UcxWorker::PeerId peer = states_.at(out.comm_id).peers[out.node];
    return worker().send(peer, out.header, from->base + offset, bytes,
                         [part](ErrorCode code, const std::string& why) { part.end(code, why); });
  }
  // GPU memory goes through pinned host memory, which UCX sends. With a resume window, host
  // memory is copied too (what this node keeps for the node, KeptArrivals).
  std::shared_ptr<StagedData> staged;
  try {
    staged = staging_.take(bytes);
  } catch (const Error& e) {
    return part.end(e.code(), e.message());
  }
  if (from->device != kHostMemory) return send_staged_from_gpu(out, from, offset, staged, part);
  if (bytes <= kCopiedHereBytes) {
    // Small: copied here at once (the engine's round trip would cost more than the copy).
    std::memcpy(staged->data, from->base + offset, bytes);
    return send_and_keep(out.comm_id, out.node, out.seq, out.rank, out.header, std::move(staged),
                         part);
  }
  send_host_while_copying(out, from, offset, staged, part, hold.split());
}

void ArrivalSender::send_staged_from_gpu(const OutgoingArrival& out,
                                         const std::shared_ptr<MappedBuffer>& from, uint64_t offset,
                                         std::shared_ptr<StagedData> staged, NetworkHold part) {
  copies_.submit_one(CopyRequest{from->base + offset, staged->data, staged->bytes, 0, from->device,
                                 kHostMemory, from, staged},
                     [this, out, staged, part](ErrorCode code) mutable {
                       if (code != ErrorCode::kOk)
                         return part.end(
                             code, "copying its data into host memory failed on the copy engine");
                       send_and_keep(out.comm_id, out.node, out.seq, out.rank, out.header,
                                     std::move(staged), part);
                     });
}

void ArrivalSender::send_host_while_copying(const OutgoingArrival& out,
                                            const std::shared_ptr<MappedBuffer>& from,
                                            uint64_t offset, std::shared_ptr<StagedData> staged,
                                            NetworkHold send_part, NetworkHold copy_part) {
  // Sent from the rank's buffer while the engine copies it for keeping, so the copy adds no
  // latency. Whichever of the send and the copy ends second sends the copy, when the send did not
  // reach the node (it was away, or the transfer failed): a node that came back meanwhile still
  // gets it.
  struct HostSend {
    bool sent = false;
    bool reached = false;
    bool copied = false;
  };
  auto progress = std::make_shared<HostSend>();
  copies_.submit_one(CopyRequest{from->base + offset, staged->data, staged->bytes, 0, from->device,
                                 kHostMemory, from, staged},
                     [this, out, staged, copy_part, progress](ErrorCode code) {
                       if (code != ErrorCode::kOk)
                         return copy_part.end(
                             code, "copying its data for another node failed on the engine");
                       if (auto it = states_.find(out.comm_id); it != states_.end())
                         it->second.kept.keep({out.node, out.seq, out.rank, out.header, staged});
                       progress->copied = true;
                       copy_part.end();
                       if (progress->sent && !progress->reached)
                         send_or_hold(out.comm_id, out.node, out.header, staged->data,
                                      staged->bytes, staged, {}, {});
                     });
  send_or_hold(out.comm_id, out.node, out.header, from->base + offset, staged->bytes, from,
               send_part, [this, out, staged, progress](bool reached) {
                 progress->sent = true;
                 progress->reached = reached;
                 if (!reached && progress->copied)
                   send_or_hold(out.comm_id, out.node, out.header, staged->data, staged->bytes,
                                staged, {}, {});
               });
}

void ArrivalSender::send_and_keep(uint64_t comm_id, uint32_t node, uint64_t seq, uint32_t rank,
                                  std::string header, std::shared_ptr<StagedData> data,
                                  NetworkHold part) {
  if (keeping())
    if (auto it = states_.find(comm_id); it != states_.end())
      it->second.kept.keep({node, seq, rank, header, data});
  send_or_hold(comm_id, node, std::move(header), data ? data->data : nullptr,
               data ? data->bytes : 0, data, std::move(part), {});
}

void ArrivalSender::send_or_hold(uint64_t comm_id, uint32_t node, std::string header,
                                 const void* bytes, std::size_t size,
                                 std::shared_ptr<const void> owner, NetworkHold part,
                                 std::function<void(bool reached)> after) {
  auto end = [part, after](ErrorCode code, const std::string& why, bool reached) {
    part.end(code, why);
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
            liveness_.hold(*comm, state->second, node, "a transfer to it failed: " + why);
          return end(ErrorCode::kOk, {}, false);
        }
        end(code, why, true);
      });
}

}  // namespace iris::daemon
