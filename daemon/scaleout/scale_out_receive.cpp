// ArrivalReceiver: another node's arrival taken in: checked against the communicator's layout,
// dropped when already heard of (a node sending again after a restart), landed in a staging area or
// straight in the local ranks' buffers, and handed to the scheduler as that rank's arrival.
#include <algorithm>
#include <cstring>

#include "daemon/scaleout/scale_out_internal.hpp"
#include "iris/error.hpp"
#include "iris/shared/collective_shape.hpp"

namespace iris::daemon {

using namespace scale_out_limits;

void ArrivalReceiver::handle_arrival(Communicator& comm, CommState& state, const v1::NodeArrival& a,
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
      liveness_.hold(*c, state->second, node,
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

}  // namespace iris::daemon
