#include "daemon/allgather_scheduler.hpp"

#include <spdlog/spdlog.h>

namespace iris::daemon {

AllGatherScheduler::AllGatherScheduler(Engine& engine, Stats& stats, CompleteFn complete,
                                       uint64_t max_in_flight)
    : engine_(engine),
      stats_(stats),
      complete_(std::move(complete)),
      max_in_flight_(max_in_flight) {}

Collective* AllGatherScheduler::find_or_create(Communicator& comm, uint64_t seq, bool& over_limit) {
  over_limit = false;
  auto it = comm.in_flight.find(seq);
  if (it != comm.in_flight.end()) return it->second.get();
  // Over the limit the record is still made (it must absorb the other ranks' arrivals and fail
  // them too), but the collective fails at once.
  over_limit = collectives_in_flight_ >= max_in_flight_;
  auto [pos, _] = comm.in_flight.emplace(seq, std::make_unique<Collective>(seq, comm.nranks));
  ++collectives_in_flight_;
  stats_.collectives_in_flight.store(collectives_in_flight_, std::memory_order_relaxed);
  return pos->second.get();
}

void AllGatherScheduler::arrive(Communicator& comm, uint32_t rank, uint64_t seq,
                                const CompletionTarget& target,
                                std::optional<ValidatedAllGather> plan, ErrorCode error) {
  if (comm.broken) {
    stats_.count_error(comm.broken_code);
    complete_(target, comm.broken_code);
    return;
  }
  bool over_limit = false;
  Collective& c = *find_or_create(comm, seq, over_limit);
  c.arrivals[rank] = Arrival{target, std::move(plan)};
  ++c.arrived;

  if (over_limit) {
    spdlog::warn(
        "comm {} seq {}: more than {} collectives in flight; failing it (raise "
        "max_inflight in the irisd config)",
        comm.key, seq, max_in_flight_);
    fail(c, ErrorCode::kLimitExceeded);
  } else if (!c.arrivals[rank]->plan) {
    fail(c, error);
  } else if (c.bytes_known && c.bytes != c.arrivals[rank]->plan->bytes) {
    spdlog::warn("comm {} seq {}: rank {} passed {} bytes, other ranks {}; failing the collective",
                 comm.key, seq, rank, c.arrivals[rank]->plan->bytes, c.bytes);
    fail(c, ErrorCode::kSizeMismatch);
  } else if (c.error == ErrorCode::kOk) {
    c.bytes = c.arrivals[rank]->plan->bytes;
    c.bytes_known = true;
    start_copies(comm, c, rank);
  }
  // Blocks that need no copy (0 bytes, in place) land without an engine completion, so any
  // arrived rank may be done now, not only this one.
  for (uint32_t r = 0; r < comm.nranks; ++r) try_deliver(c, r);
  retire_if_done(comm, c);
}

void AllGatherScheduler::start_copies(Communicator& comm, Collective& c, uint32_t rank) {
  batch_.clear();
  for (uint32_t j = 0; j < comm.nranks; ++j) {
    if (!c.arrivals[j] || !c.arrivals[j]->plan) continue;
    add_copy(comm, c, rank, j);
    if (j != rank) add_copy(comm, c, j, rank);
  }
  if (!batch_.empty()) engine_.submit(batch_);
}

void AllGatherScheduler::add_copy(Communicator& comm, Collective& c, uint32_t src, uint32_t dst) {
  const ValidatedAllGather& from = *c.arrivals[src]->plan;
  const ValidatedAllGather& to = *c.arrivals[dst]->plan;
  if (c.bytes == 0 || (src == dst && (from.in_place || from.own_block_copied))) {
    ++c.landed[dst];
    return;
  }
  const uint64_t cookie = next_cookie_++;
  copies_.emplace(cookie, CopyTag{&comm, &c, src, dst});
  ++c.copies_touching[src];
  if (dst != src) ++c.copies_touching[dst];
  ++c.total_in_flight;
  batch_.push_back({from.send_ptr, to.recv_ptr + uint64_t{src} * c.bytes, c.bytes, cookie,
                    from.send->device, to.recv->device});
}

void AllGatherScheduler::on_copy_complete(const CopyCompletion& completion) {
  auto it = copies_.find(completion.cookie);
  if (it == copies_.end()) {
    spdlog::error("engine completed unknown copy {}", completion.cookie);
    return;
  }
  const CopyTag tag = it->second;
  copies_.erase(it);
  Collective& c = *tag.collective;
  --c.copies_touching[tag.src_rank];
  if (tag.dst_rank != tag.src_rank) --c.copies_touching[tag.dst_rank];
  --c.total_in_flight;
  stats_.copies_total.fetch_add(1, std::memory_order_relaxed);
  if (completion.code == ErrorCode::kOk) {
    ++c.landed[tag.dst_rank];
    stats_.bytes_copied_total.fetch_add(completion.bytes, std::memory_order_relaxed);
    auto& by_path = completion.path == TransferPath::kCopyEngine ? stats_.copy_engine_bytes_total
                                                                 : stats_.compute_unit_bytes_total;
    by_path.fetch_add(completion.bytes, std::memory_order_relaxed);
    try_deliver(c, tag.dst_rank);
    try_deliver(c, tag.src_rank);
  } else {
    spdlog::error("comm {} seq {}: copy from rank {} into rank {} failed: {}", tag.comm->key, c.seq,
                  tag.src_rank, tag.dst_rank, to_string(completion.code));
    fail(c, completion.code);
  }
  retire_if_done(*tag.comm, c);
}

void AllGatherScheduler::fail(Collective& c, ErrorCode code) {
  if (c.error == ErrorCode::kOk) c.error = code;
  for (uint32_t r = 0; r < c.arrivals.size(); ++r) try_deliver(c, r);
}

void AllGatherScheduler::try_deliver(Collective& c, uint32_t rank) {
  // No copy in flight reads or writes this rank's buffers, and (unless failed) all blocks are in
  // its receive buffer: by then every rank has arrived, so its own block has reached them all.
  if (c.delivered[rank] || !c.arrivals[rank] || c.copies_touching[rank] != 0) return;
  if (c.error == ErrorCode::kOk && c.landed[rank] != c.arrivals.size()) return;
  c.delivered[rank] = true;
  ++c.delivered_count;
  if (c.error != ErrorCode::kOk) stats_.count_error(c.error);
  complete_(c.arrivals[rank]->target, c.error);
}

void AllGatherScheduler::retire_if_done(Communicator& comm, Collective& c) {
  const bool everyone_arrived = c.arrived == comm.nranks || comm.broken;
  if (!everyone_arrived || c.delivered_count != c.arrived || c.total_in_flight != 0) return;
  if (c.error == ErrorCode::kOk) {
    ++comm.completed;
    stats_.collectives_completed_total.fetch_add(1, std::memory_order_relaxed);
  } else {
    stats_.collectives_failed_total.fetch_add(1, std::memory_order_relaxed);
  }
  comm.in_flight.erase(c.seq);  // destroys c
  --collectives_in_flight_;
  stats_.collectives_in_flight.store(collectives_in_flight_, std::memory_order_relaxed);
}

void AllGatherScheduler::break_comm(Communicator& comm, ErrorCode code) {
  if (!comm.broken) {
    comm.broken = true;
    comm.broken_code = code;
  }
  // A collective every rank has submitted has all its sources: it completes normally (copies
  // in flight keep a dead rank's buffers mapped). Only those still waiting for a rank fail.
  std::vector<Collective*> waiting;
  for (auto& [seq, c] : comm.in_flight)
    if (c->arrived < comm.nranks) waiting.push_back(c.get());
  for (Collective* c : waiting) {
    fail(*c, code);
    retire_if_done(comm, *c);
  }
}

}  // namespace iris::daemon
