#include "daemon/collectives/collective_scheduler.hpp"

#include <span>

#include <spdlog/spdlog.h>

namespace iris::daemon {

template <typename... Args>
void CollectiveScheduler::comm_warn(Communicator& comm, fmt::format_string<Args...> format,
                                    Args&&... args) {
  log_.warn(comm.uid, TenantLogKind::kCommunicator, "comm '{}' {}", comm.key,
            fmt::format(format, std::forward<Args>(args)...));
}

template <typename... Args>
void CollectiveScheduler::trace(Communicator& comm, fmt::format_string<Args...> format,
                                Args&&... args) {
  if (!spdlog::should_log(spdlog::level::debug)) return;
  std::string note;
  if (!comm.trace_limit.allow(note)) return;
  spdlog::debug("comm '{}' {}{}", comm.key, fmt::format(format, std::forward<Args>(args)...), note);
}

namespace {
// The size a collective's latency is classed by: a block, or all a rank sends in all-to-all-v.
uint64_t block_bytes(const RankArgs& args) {
  if (args.kind != CollectiveKind::kAllToAllV) return args.bytes;
  uint64_t sum = 0;
  for (uint64_t n : args.send_counts) sum += n;
  return sum;
}
}  // namespace

CollectiveScheduler::CollectiveScheduler(CopyDispatcher& copies, Stats& stats, TenantLog& log,
                                         CompleteFn complete, uint64_t max_in_flight)
    : copies_(copies),
      stats_(stats),
      log_(log),
      complete_(std::move(complete)),
      max_in_flight_(max_in_flight),
      fill_owners_(copies.engine().outlives_its_completions()) {}

Collective* CollectiveScheduler::find_or_create(Communicator& comm, uint64_t seq,
                                                bool& over_limit) {
  over_limit = false;
  auto it = comm.in_flight.find(seq);
  if (it != comm.in_flight.end()) return &it->second;
  // Over the limit the record is still made (it must absorb the other ranks' arrivals and fail
  // them too), but the collective fails at once. The limit is per communicator: one tenant's
  // backlog never fails another's collectives.
  over_limit = comm.in_flight.size() >= max_in_flight_;
  Collective& c = spare_collectives_.put(comm.in_flight, seq);
  c.seq = seq;
  c.nranks = comm.nranks;
  c.ranks.reset(comm.nranks);
  c.started = std::chrono::steady_clock::now();
  if (comm.resumed) add_resumed_ranks(comm, c);
  ++collectives_in_flight_;
  stats_.collectives_in_flight.store(collectives_in_flight_, std::memory_order_relaxed);
  return &c;
}

void CollectiveScheduler::add_resumed_ranks(const Communicator& comm, Collective& c) {
  for (uint32_t r = 0; r < comm.nranks; ++r) {
    if (!comm.done_before_restart(r, c.seq) || c.ranks.contains(r)) continue;
    ArrivedRank& done = c.ranks.put(r);
    done.delivered = true;
    ++c.delivered_count;
  }
}

void CollectiveScheduler::resumed_rank(Communicator& comm, uint32_t rank) {
  std::vector<Collective*> before;
  for (auto& [seq, c] : comm.in_flight)
    if (comm.done_before_restart(rank, seq) && !c.ranks.contains(rank)) before.push_back(&c);
  for (Collective* c : before) {
    add_resumed_ranks(comm, *c);
    // This rank may have been the last one a latency collective waited for (starts_later).
    if (c->error == ErrorCode::kOk && c->arrived() == comm.nranks)
      if (auto bad = start_copies(comm, *c)) fail(*c, bad->code, bad->message);
    deliver_all(*c);
    retire_if_done(comm, *c);
  }
}

void CollectiveScheduler::arrive(Communicator& comm, uint32_t rank, uint64_t seq,
                                 const CompletionTarget& target, ValidatedRequest&& request) {
  arrive_local(comm, rank, seq, target, &request, ErrorCode::kOk, {});
}

void CollectiveScheduler::arrive_failed(Communicator& comm, uint32_t rank, uint64_t seq,
                                        const CompletionTarget& target, ErrorCode error,
                                        const std::string& why) {
  arrive_local(comm, rank, seq, target, nullptr, error, why);
}

void CollectiveScheduler::arrive_local(Communicator& comm, uint32_t rank, uint64_t seq,
                                       const CompletionTarget& target, ValidatedRequest* request,
                                       ErrorCode error, const std::string& why) {
  // On a broken communicator a collective other ranks already reached still tells a late rank
  // its own failure (size_mismatch, say); only collectives nobody reached fail as peer_lost.
  if (comm.broken && comm.in_flight.count(seq) == 0) {
    stats_.count_error(comm.broken_code);
    complete_(target, comm.broken_code, comm.broken_why);
    return;
  }
  bool over_limit = false;
  Collective& c = *find_or_create(comm, seq, over_limit);
  ArrivedRank& arrived = c.ranks.put(rank);
  arrived.target = target;
  // Moved once, from where it was validated into the record.
  if (request != nullptr) arrived.request.emplace(std::move(*request));
  admit(comm, c, rank, arrived, over_limit, error, why);
}

void CollectiveScheduler::arrive_remote(Communicator& comm, uint32_t rank, uint64_t seq,
                                        std::optional<ValidatedRequest>&& request, ErrorCode error,
                                        const std::string& why) {
  if (comm.broken && comm.in_flight.count(seq) == 0) return;  // nobody here waits for it
  if (auto it = comm.in_flight.find(seq);
      it != comm.in_flight.end() && it->second.ranks.contains(rank)) {
    comm_warn(comm, "seq {}: rank {} arrived twice from its node; ignoring the second", seq, rank);
    return;
  }
  bool over_limit = false;
  Collective& c = *find_or_create(comm, seq, over_limit);
  ArrivedRank& arrived = c.ranks.put(rank);
  arrived.request = std::move(request);
  arrived.remote = true;
  arrived.delivered = true;  // its own daemon tells it
  ++c.delivered_count;
  admit(comm, c, rank, arrived, over_limit, error, why);
}

void CollectiveScheduler::admit(Communicator& comm, Collective& c, uint32_t rank,
                                ArrivedRank& arrived, bool over_limit, ErrorCode error,
                                const std::string& why) {
  if (over_limit) {
    comm_warn(comm,
              "seq {}: more than {} collectives in flight on this communicator; failing it "
              "(wait for some, or raise max_inflight in the irisd config)",
              c.seq, max_in_flight_);
    fail(c, ErrorCode::kLimitExceeded,
         "communicator '" + comm.key + "' already has " + std::to_string(max_in_flight_) +
             " collectives in flight (max_inflight): wait for some before submitting more");
  } else if (!arrived.request) {
    fail(c, error, "rank " + std::to_string(rank) + "'s request: " + why);
  } else if (c.error == ErrorCode::kOk) {
    const RankArgs& args = arrived.request->args;
    trace(comm, "seq {} ({}): rank {} arrived ({}/{}), {} bytes", c.seq,
          shm::opcode_name(args.kind), rank, c.arrived(), comm.nranks, args.bytes);
    std::optional<PlanError> bad;
    if (const RankArgs* reference = c.reference())
      bad = check_agreement(*reference, *c.reference_rank, args, rank);
    else
      c.reference_rank = rank;
    if (!bad && !starts_later(comm, c, args)) bad = start_copies(comm, c);
    if (bad) {
      comm_warn(comm, "seq {} ({}): {}; failing the collective on every rank", c.seq,
                shm::opcode_name(args.kind), bad->message);
      fail(c, bad->code, bad->message);
    }
  }
  // The other nodes hear of every local arrival, failed or not: they wait for it too. The rank
  // stays held by this part of the hold until the end here, so that no transfer ending at once
  // can complete it (or retire the collective) before its failure, if any, is recorded.
  NetworkHold hold;
  if (!arrived.remote && comm.layout && remote_ != nullptr) {
    hold = NetworkHold(*this, add_tag(CopyTag{&comm, &c, rank, rank, true}));
    ++arrived.copies_touching;
    ++c.total_in_flight;
    if (auto bad = remote_->send_arrival(comm, c, rank, hold)) fail(c, bad->code, bad->message);
  }
  // Ranks whose pairs move nothing (0 bytes, in place, off the root) finish without an engine
  // completion, so any arrived rank may be done now, not only this one.
  deliver_all(c);
  if (hold) return hold.end();  // delivers the rank and retires the collective if it is done
  retire_if_done(comm, c);
}

bool CollectiveScheduler::plan_copy(const Communicator& comm, uint32_t src, ArrivedRank& from_rank,
                                    uint32_t dst, ArrivedRank& to_rank,
                                    std::optional<PlanError>& bad) {
  // Data for another node's rank is sent to that node (RemoteNodes), never copied here.
  if (!comm.is_local(dst)) return true;
  const ValidatedRequest& from = *from_rank.request;
  const ValidatedRequest& to = *to_rank.request;
  auto pair = plan_pair(from.args, src, to.args, dst);
  if (auto* disagreed = std::get_if<PlanError>(&pair)) {
    bad = std::move(*disagreed);
    return false;
  }
  const auto& planned = std::get<std::optional<PlannedCopy>>(pair);
  if (!planned) return true;
  // A local rank's ranges were checked against its buffers; another node's data is what came.
  if (planned->src_offset > from.send->bytes ||
      planned->bytes > from.send->bytes - planned->src_offset) {
    bad = PlanError{ErrorCode::kInvalidArgument,
                    "rank " + std::to_string(src) + "'s data from its node does not hold the " +
                        std::to_string(planned->bytes) + " bytes rank " + std::to_string(dst) +
                        " needs"};
    return false;
  }
  planned_.push_back(PairCopy{from.send->base + planned->src_offset,
                              to.recv->base + planned->dst_offset, planned->bytes,
                              from.send->device, to.recv->device, src, dst, &from_rank, &to_rank});
  return true;
}

bool CollectiveScheduler::plan_arrival(const Communicator& comm, Collective& c, uint32_t record,
                                       std::optional<PlanError>& bad) {
  const std::span<ArrivedRank> so_far(c.ranks.begin(), record + 1);
  ArrivedRank& arrived = so_far.back();
  const uint32_t rank = arrived.rank;
  // Only pairs whose sides the collective's shape makes significant can move a block, so a
  // rooted collective's other ranks pair with the root alone and a barrier with nobody: an
  // arrival costs what its copies need, not n pairs each way (57 of a 64 B broadcast's 64 pair
  // plans at 8 ranks found nothing). All-to-all-v's counts decide pair by pair.
  const RankArgs& args = arrived.request->args;
  const shm::CollectiveShape* shape = shm::shape_of(args.kind);
  auto sends = [&](uint32_t r) { return !shape || shape->send.significant(r, args.root); };
  auto receives = [&](uint32_t r) { return !shape || shape->recv.significant(r, args.root); };
  const bool rank_sends = sends(rank), rank_receives = receives(rank);
  if (!rank_sends && !rank_receives) return true;
  auto pair_with = [&](ArrivedRank& other) {
    if (!other.request) return true;
    if (rank_sends && receives(other.rank) &&
        !plan_copy(comm, rank, arrived, other.rank, other, bad))
      return false;
    return other.rank == rank || !rank_receives || !sends(other.rank) ||
           plan_copy(comm, other.rank, other, rank, arrived, bad);
  };
  const bool root_alone = shape && shape->rooted &&
                          (!rank_sends || shape->recv.on == shm::On::kRoot) &&
                          (!rank_receives || shape->send.on == shm::On::kRoot);
  if (root_alone) {
    ArrivedRank* root = c.ranks.find(args.root);
    const bool root_before = root != nullptr && root <= &arrived;
    return !root_before || pair_with(*root);
  }
  for (ArrivedRank& other : so_far)
    if (!pair_with(other)) return false;
  return true;
}

bool CollectiveScheduler::starts_later(const Communicator& comm, const Collective& c,
                                       const RankArgs& args) const {
  // Not across nodes: the last rank is often another node's, and waiting for its data would
  // hold the local copies through the network's latency. Only copies that together fit in one
  // slice (n x n blocks, every pair: a bound for the rooted collectives), which wait one turn:
  // holding them back costs at most that slice's time, where a larger collective's early copies
  // had better run while its last ranks come.
  const uint64_t pairs = uint64_t{comm.nranks} * comm.nranks;
  const uint64_t block = block_bytes(args);
  return !comm.layout && c.arrived() < comm.nranks &&
         block <= copies_.pacing().slice_bytes / std::max<uint64_t>(pairs, 1) &&
         copies_.class_of(block, comm.traffic_class, comm.latency_granted) ==
             TrafficClass::kLatency &&
         copies_.pacing_now();
}

std::optional<PlanError> CollectiveScheduler::start_copies(Communicator& comm, Collective& c) {
  planned_.clear();
  std::optional<PlanError> bad;
  // Records without a request (ranks done before a restart) move nothing.
  for (; c.started_records < c.arrived() && !bad; ++c.started_records)
    if (c.ranks.begin()[c.started_records].request) plan_arrival(comm, c, c.started_records, bad);
  // Copies already planned run (and complete) even when a later pair disagreed.
  uint64_t total = 0, largest = 0;
  for (const PairCopy& p : planned_) {
    total += p.bytes;
    largest = std::max(largest, p.bytes);
  }
  uint64_t now_left = copies_.engine().copy_now_share(total);
  uint64_t now_bytes = 0;
  batch_.clear();
  now_.clear();
  for (const PairCopy& p : planned_) {
    // Done before start_copies returns: nothing to track, the ranks' completions need not wait.
    // Only between host memory: the progress thread cannot touch GPU memory.
    if (p.bytes <= now_left && p.src_device == kHostMemory && p.dst_device == kHostMemory) {
      now_left -= p.bytes;
      now_bytes += p.bytes;
      now_.push_back(HostCopy{p.src, p.dst, p.bytes});
      continue;
    }
    CopyRequest copy{p.src, p.dst, p.bytes, 0, p.src_device, p.dst_device};
    copies_.track(copy, *this, add_tag(CopyTag{&comm, &c, p.src_rank, p.dst_rank}));
    ++p.from->copies_touching;
    if (p.dst_rank != p.src_rank) ++p.to->copies_touching;
    ++c.total_in_flight;
    if (fill_owners_) {
      copy.src_owner = p.from->request->send;
      copy.dst_owner = p.to->request->recv;
    }
    batch_.push_back(std::move(copy));
  }
  // The engine's share first, so that its workers start while this thread copies its own.
  if (!batch_.empty() || !now_.empty())
    trace(comm, "seq {}: {} copies start after {} of {} arrivals, {} of them at once", c.seq,
          batch_.size() + now_.size(), c.arrived(), comm.nranks, now_.size());
  const FlowKey flow{comm.uid, comm.id,
                     copies_.class_of(largest, comm.traffic_class, comm.latency_granted)};
  if (!batch_.empty()) {
    copies_.submit(batch_, flow);
    batch_.clear();  // its requests hold the buffers: only the engine may keep them now
  }
  copies_.copy_now(now_, now_bytes, flow);
  return bad;
}

void CollectiveScheduler::copy_done(uint64_t cookie, const CopyCompletion& completion) {
  CopyTag* found = find_tag(cookie);
  if (found == nullptr || found->network) {
    spdlog::error("a copy of no collective in flight completed (tag {})", cookie);
    return;
  }
  const CopyTag tag = *found;
  release_tag(cookie);
  if (completion.code == ErrorCode::kOk) return finish_transfer(tag, ErrorCode::kOk, {});
  // Failure words are made only on failure: a copy's completion is the hottest path here.
  log_.log(spdlog::level::err, tag.comm->uid, TenantLogKind::kCommunicator,
           "comm '{}' seq {}: copy from rank {} into rank {} failed: {}", tag.comm->key,
           tag.collective->seq, tag.src_rank, tag.dst_rank, to_string(completion.code));
  finish_transfer(tag, completion.code,
                  "the copy from rank " + std::to_string(tag.src_rank) + " into rank " +
                      std::to_string(tag.dst_rank) +
                      " failed on the copy engine (the daemon log has the engine's reason)");
}

void CollectiveScheduler::network_ended(uint64_t cookie, ErrorCode code, const std::string& why) {
  CopyTag* found = find_tag(cookie);
  if (found == nullptr || !found->network) return;
  const CopyTag tag = *found;
  release_tag(cookie);
  if (code == ErrorCode::kOk) return finish_transfer(tag, ErrorCode::kOk, {});
  log_.log(spdlog::level::err, tag.comm->uid, TenantLogKind::kCommunicator,
           "comm '{}' seq {}: sending rank {}'s data to another node failed: {}", tag.comm->key,
           tag.collective->seq, tag.src_rank, why);
  finish_transfer(tag, code,
                  "sending rank " + std::to_string(tag.src_rank) +
                      "'s data to another node failed (" + why + ")");
}

uint64_t CollectiveScheduler::add_tag(const CopyTag& tag) {
  uint32_t index;
  if (free_tags_.empty()) {
    index = static_cast<uint32_t>(tags_.size());
    tags_.push_back({});
  } else {
    index = free_tags_.back();
    free_tags_.pop_back();
  }
  TagSlot& slot = tags_[index];
  slot.tag = tag;
  slot.used = true;
  ++slot.generation;
  return (uint64_t{slot.generation} << 32) | index;
}

CollectiveScheduler::CopyTag* CollectiveScheduler::find_tag(uint64_t cookie) {
  const uint64_t index = cookie & 0xffffffffu;
  if (index >= tags_.size()) return nullptr;
  TagSlot& slot = tags_[index];
  if (!slot.used || slot.generation != static_cast<uint32_t>(cookie >> 32)) return nullptr;
  return &slot.tag;
}

void CollectiveScheduler::release_tag(uint64_t cookie) {
  const auto index = static_cast<uint32_t>(cookie & 0xffffffffu);
  tags_[index].used = false;
  free_tags_.push_back(index);
}

void CollectiveScheduler::finish_transfer(const CopyTag& tag, ErrorCode code,
                                          const std::string& failure) {
  Collective& c = *tag.collective;
  --c.ranks.at(tag.src_rank).copies_touching;
  if (tag.dst_rank != tag.src_rank) --c.ranks.at(tag.dst_rank).copies_touching;
  --c.total_in_flight;
  if (code == ErrorCode::kOk) {
    try_deliver(c, tag.dst_rank);
    try_deliver(c, tag.src_rank);
  } else {
    fail(c, code, failure);
  }
  retire_if_done(*tag.comm, c);
}

void CollectiveScheduler::fail(Collective& c, ErrorCode code, const std::string& why) {
  if (c.error == ErrorCode::kOk) {
    c.error = code;
    c.why = why;
  }
  deliver_all(c);
}

void CollectiveScheduler::deliver_all(Collective& c) {
  // Each arrival asks: before the last one the walk would find nobody.
  if (!c.settled()) return;
  for (ArrivedRank& arrived : c.ranks) try_deliver(c, arrived);
}

void CollectiveScheduler::try_deliver(Collective& c, uint32_t rank) {
  try_deliver(c, c.ranks.at(rank));
}

void CollectiveScheduler::try_deliver(Collective& c, ArrivedRank& arrived) {
  // Once every rank has arrived every copy of the plan has been issued, so no copy in flight
  // touching this rank means all of them have landed.
  if (arrived.delivered || arrived.copies_touching != 0) return;
  if (!c.settled()) return;
  arrived.delivered = true;
  ++c.delivered_count;
  if (c.error != ErrorCode::kOk) stats_.count_error(c.error);
  complete_(arrived.target, c.error, c.why);
}

bool CollectiveScheduler::may_still_arrive(const Communicator& comm, const Collective& c) const {
  if (c.arrived() == comm.nranks) return false;
  if (!comm.broken) return true;
  // Broken: ranks that left never come, the others (still members) still may.
  for (uint32_t r = 0; r < comm.nranks; ++r)
    if (comm.members[r] && !c.ranks.contains(r)) return true;
  return false;
}

void CollectiveScheduler::retire_if_done(Communicator& comm, Collective& c) {
  if (c.delivered_count != c.arrived() || c.total_in_flight != 0 || may_still_arrive(comm, c))
    return;
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::steady_clock::now() - c.started)
                          .count();
  trace(comm, "seq {}: {} after {} us", c.seq, c.error == ErrorCode::kOk ? "completed" : "failed",
        micros);
  if (c.error == ErrorCode::kOk) ++comm.completed;
  const RankArgs* reference = c.reference();
  stats_.count_collective(reference ? static_cast<uint32_t>(reference->kind) : 0,
                          c.error == ErrorCode::kOk ? Outcome::kCompleted : Outcome::kFailed,
                          reference ? block_bytes(*reference) : 0, static_cast<uint64_t>(micros));
  const uint64_t seq = c.seq;
  spare_collectives_.erase(comm.in_flight, comm.in_flight.find(seq));  // ends c
  if (comm.layout && remote_ != nullptr) remote_->retired(comm, seq);
  --collectives_in_flight_;
  stats_.collectives_in_flight.store(collectives_in_flight_, std::memory_order_relaxed);
}

void CollectiveScheduler::break_comm(Communicator& comm, ErrorCode code, const std::string& why,
                                     bool from_remote) {
  if (!comm.broken) {
    comm.broken = true;
    comm.broken_code = code;
    comm.broken_why = why;
    if (!from_remote && comm.layout && remote_ != nullptr) remote_->broke_here(comm, why);
  }
  // A collective every rank has submitted has all its sources: it completes normally (copies
  // in flight keep a dead rank's buffers mapped). Only those still waiting for a rank fail.
  std::vector<Collective*> waiting;
  for (auto& [seq, c] : comm.in_flight)
    if (c.arrived() < comm.nranks) waiting.push_back(&c);
  for (Collective* c : waiting) {
    fail(*c, comm.broken_code, comm.broken_why);
    retire_if_done(comm, *c);
  }
}

}  // namespace iris::daemon
