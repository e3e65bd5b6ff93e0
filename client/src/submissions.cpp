// The session's submissions: the ring (one producer per session), the completion slots and their
// pool, the argument areas, and the waits. A request takes a slot, its entry goes into the ring
// (push), and its Request waits on the slot's completion word, spinning briefly and then sleeping
// on the segment's futex; the slot goes back to the pool once its Request has seen the result
// (or is taken back completed when every slot is held). Its resume steps settle what the previous
// irisd finished, hand the argument areas over, tell the communicators what is unfinished, and
// push the unfinished entries again in their order.
#include "client/src/submissions.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "iris/shared/collective_shape.hpp"
#include "iris/shared/cpu_relax.hpp"
#include "iris/shared/futex.hpp"

namespace iris {

namespace {
using clock = std::chrono::steady_clock;
constexpr auto kPureSpin = std::chrono::microseconds(2);
// How often a sleeping waiter checks that irisd is still there.
constexpr auto kLivenessInterval = std::chrono::milliseconds(20);
}  // namespace

Submissions::Submissions(const shm::SegmentView& view, SessionLink& link,
                         Registrations& registrations, StreamFlagsMapping& stream_flags,
                         std::chrono::microseconds wait_spin)
    : view_(view),
      link_(link),
      registrations_(registrations),
      stream_flags_(stream_flags),
      wait_spin_(wait_spin),
      producer_(view.ring_control, view.ring_entries, view.ring_depth),
      slots_(view.ring_depth) {
  for (uint32_t i = view.ring_depth; i > 0; --i) free_slots_.push_back(i - 1);
}

void Submissions::sleep_for_completions(clock::time_point deadline,
                                        const std::function<bool()>& ready) const {
  // The epoch is read before `ready` is checked: a completion published in between changes it,
  // and the futex then returns at once instead of sleeping through the completion.
  const uint32_t epoch = view_.header->completion_epoch.load(std::memory_order_acquire);
  view_.header->client_waiters.fetch_add(1, std::memory_order_seq_cst);
  if (!ready()) {
    const auto slice = std::min<clock::duration>(kLivenessInterval, deadline - clock::now());
    shm::futex_wait(view_.header->completion_epoch, epoch, slice);
  }
  view_.header->client_waiters.fetch_sub(1, std::memory_order_seq_cst);
}

std::optional<ErrorCode> Submissions::poll(uint32_t slot, uint32_t generation) const {
  const uint64_t word = view_.slots[slot].word.load(std::memory_order_acquire);
  if (!shm::completion_matches(word, generation)) return std::nullopt;
  return shm::completion_code(word);
}

std::string Submissions::failure_text(uint32_t slot) const {
  const char* text = view_.failures[slot].text;
  return std::string(text, ::strnlen(text, shm::kFailureTextBytes));
}

void Submissions::count_rejection() {
  view_.header->client_rejections.fetch_add(1, std::memory_order_relaxed);
}

std::optional<ErrorCode> Submissions::wait(uint32_t slot, uint32_t generation,
                                           clock::time_point deadline, const Outcome* outcome) {
  link_.check_owner();
  // Taken back while we waited: the slot may already hold another request's completion.
  auto result = [&]() -> std::optional<ErrorCode> {
    if (outcome != nullptr && outcome->ready.load(std::memory_order_acquire)) return outcome->code;
    return poll(slot, generation);
  };
  const auto start = clock::now();
  const auto spin_until = std::min(deadline, start + wait_spin_);
  const auto yield_after = start + kPureSpin;
  for (auto now = start; now < spin_until; now = clock::now()) {
    if (auto code = result()) return code;
    // Past the first microseconds, give the core away on each turn: on a busy node the daemon
    // (or a peer rank) may be runnable on this very core, and a pure spin would hold it off
    // until our time slice ends.
    if (now < yield_after) {
      cpu_relax();
    } else {
      sched_yield();
    }
  }
  for (;;) {
    if (auto code = result()) return code;
    link_.throw_if_gone();
    if (clock::now() >= deadline) return std::nullopt;
    sleep_for_completions(deadline, [&] { return result().has_value(); });
  }
}

uint32_t Submissions::acquire_slot(clock::time_point deadline, Outcome* outcome,
                                   uint32_t* generation) {
  for (;;) {
    {
      std::lock_guard lock(slots_mutex_);
      if (free_slots_.empty()) {
        // Every slot is held: take back those whose request completed, whether or not its
        // Request has looked yet (it finds the result in its outcome).
        for (uint32_t i = 0; i < slots_.size(); ++i) {
          SlotState& s = slots_[i];
          if (!s.in_use) continue;
          if (auto code = poll(i, s.generation)) take_back_completed(i, *code);
        }
      }
      if (!free_slots_.empty()) {
        const uint32_t slot = free_slots_.back();
        free_slots_.pop_back();
        SlotState& s = slots_[slot];
        s.in_use = true;
        s.queued = false;
        s.outcome = outcome;
        s.generation = s.generation + 1 == 0 ? 1 : s.generation + 1;
        if (generation != nullptr) *generation = s.generation;
        return slot;
      }
    }
    link_.throw_if_gone();
    if (clock::now() >= deadline)
      throw Error(ErrorCode::kBusy,
                  "all " + std::to_string(slots_.size()) +
                      " ring slots hold requests in flight; wait for some, or ask the operator "
                      "for a deeper ring (--ring-depth)");
    sleep_for_completions(deadline, [this] {
      std::lock_guard lock(slots_mutex_);
      for (uint32_t i = 0; i < slots_.size(); ++i)
        if (!slots_[i].in_use || poll(i, slots_[i].generation)) return true;
      return false;
    });
  }
}

void Submissions::release_slot(uint32_t slot) {
  std::lock_guard lock(slots_mutex_);
  SlotState& s = slots_[slot];
  s.in_use = false;
  s.outcome = nullptr;
  free_slots_.push_back(slot);
}

void Submissions::take_back_completed(uint32_t slot, ErrorCode code) {
  SlotState& s = slots_[slot];
  if (s.outcome != nullptr) {
    s.outcome->code = code;
    // Read now: the next request in this slot overwrites the text.
    if (code != ErrorCode::kOk) s.outcome->why = failure_text(slot);
    s.outcome->ready.store(true, std::memory_order_release);
  }
  s.outcome = nullptr;
  s.in_use = false;
  free_slots_.push_back(slot);
}

std::pair<ErrorCode, std::string> Submissions::collect(uint32_t slot, const Outcome& outcome,
                                                       ErrorCode code) {
  std::lock_guard lock(slots_mutex_);
  if (outcome.ready.load(std::memory_order_acquire)) return {outcome.code, outcome.why};
  std::string why = code != ErrorCode::kOk ? failure_text(slot) : std::string();
  SlotState& s = slots_[slot];
  s.in_use = false;
  s.outcome = nullptr;
  free_slots_.push_back(slot);
  return {code, std::move(why)};
}

void Submissions::abandon(uint32_t slot, const Outcome& outcome) {
  std::lock_guard lock(slots_mutex_);
  // Taken back already (the outcome is ready, the slot may hold another request): nothing to do.
  if (outcome.ready.load(std::memory_order_acquire)) return;
  slots_[slot].outcome = nullptr;
}

void Submissions::ring_doorbell() {
  // Pairs with the daemon's store of daemon_needs_wakeup before its last look at the ring: the
  // push above must be visible before the flag is read. A read-modify-write of the flag orders
  // them as a full fence would (a locked instruction on x86, no dearer than the fence), and
  // ThreadSanitizer, which does not model fences, follows it.
  if (view_.header->daemon_needs_wakeup.fetch_add(0, std::memory_order_seq_cst) != 0)
    link_.wake_irisd();
}

void Submissions::stage_args(uint32_t slot, std::span<const uint64_t> values,
                             shm::SubmitEntry& entry) {
  const std::size_t need = values.size_bytes();
  std::unique_lock lock(args_mutex_);
  while (args_arenas_.empty() || args_arenas_.back().stride < need) {
    std::size_t stride = 256;
    while (stride < need) stride *= 2;
    // Allocated without the lock: a resume reads the areas under it, and a session call broken
    // by a restart waits for that resume.
    lock.unlock();
    Registrations::HostAllocation allocation =
        registrations_.allocate_host(stride * slots_.size(), "allocate argument area");
    lock.lock();
    if (!link_.answered_by_current_irisd(allocation.connection)) continue;
    if (!args_arenas_.empty() && args_arenas_.back().stride >= stride) {
      // Another thread's came first.
      lock.unlock();
      try {
        registrations_.deregister(allocation.id, allocation.connection);
      } catch (const Error&) {
        // The session's end frees it.
      }
      lock.lock();
      continue;
    }
    args_arenas_.push_back({allocation.id, stride, std::move(allocation.segment)});
  }
  ArgsArena& arena = args_arenas_.back();
  const std::size_t offset = std::size_t{slot} * arena.stride;
  std::memcpy(static_cast<std::byte*>(arena.mapping.data()) + offset, values.data(), need);
  entry.args_buffer = arena.buffer_id;
  entry.args_offset = offset;
}

void Submissions::push(shm::SubmitEntry entry, CommRank* comm, bool sequenced, uint32_t slot,
                       clock::time_point deadline) {
  {
    std::unique_lock lock(submit_mutex_);
    SlotState& s = slots_[slot];
    // Slots bound the requests in flight to the ring depth, so the ring has room unless the
    // daemon is slow to pop; then this waits, never overwrites.
    for (;;) {
      // Read at each try: a session resumed meanwhile has new communicator ids. This lock
      // orders the sequence numbers, so they advance with plain stores.
      if (comm != nullptr) entry.comm_id = comm->id.load(std::memory_order_relaxed);
      if (comm != nullptr && sequenced) entry.seq = comm->next_seq.load(std::memory_order_relaxed);
      // A send's or receive's position in its channel (1, 2, ...): what lets it resume.
      if (comm != nullptr && shm::is_point_to_point(entry.opcode))
        entry.seq = comm->p2p_posted[p2p_channel(entry)] + 1;
      s.entry = entry;
      s.ticket = next_ticket_;
      s.queued = true;
      if (producer_.try_push(entry)) break;
      s.queued = false;
      if (link_.gone() || clock::now() >= deadline) {
        lock.unlock();
        release_slot(slot);
        link_.throw_if_gone();
        throw Error(ErrorCode::kBusy, "submission ring full: irisd is not keeping up");
      }
      if (link_.resuming()) {
        // The resume refills the ring and needs this lock.
        lock.unlock();
        link_.wait_while_resuming(deadline);
        lock.lock();
        continue;
      }
      std::this_thread::yield();
    }
    ++next_ticket_;
    if (comm != nullptr && sequenced)
      comm->next_seq.store(entry.seq + 1, std::memory_order_relaxed);
    if (comm != nullptr && shm::is_point_to_point(entry.opcode))
      comm->p2p_posted[p2p_channel(entry)] = entry.seq;
  }
  ring_doorbell();
}

bool Submissions::finished(uint32_t slot, uint32_t generation) const {
  if (poll(slot, generation)) return true;
  std::lock_guard lock(slots_mutex_);
  return slots_[slot].generation != generation || !slots_[slot].in_use;
}

void Submissions::release_stream_waits() {
  std::lock_guard lock(slots_mutex_);
  for (uint32_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].in_use) stream_flags_.release(i, slots_[i].generation);
}

void Submissions::wake_waiters() {
  view_.header->completion_epoch.fetch_add(1, std::memory_order_seq_cst);
  shm::futex_wake_all(view_.header->completion_epoch);
}

std::unique_lock<std::mutex> Submissions::hold_ring() {
  std::unique_lock submitting(submit_mutex_);
  // The next irisd reads the ring from where the client leaves it: empty.
  view_.ring_control->head.store(0, std::memory_order_relaxed);
  view_.ring_control->tail.store(0, std::memory_order_release);
  return submitting;
}

void Submissions::settle_stream_completions() {
  std::lock_guard lock(slots_mutex_);
  bool settled = false;
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    const SlotState& s = slots_[i];
    if (!s.in_use || !s.queued || (s.entry.flags & shm::kStreamOrdered) == 0 ||
        poll(i, s.generation))
      continue;
    // irisd writes the done flag after the copies and before the slot: a flag written by the
    // irisd that died means its stream went on (its buffers may be rewritten already), so the
    // request completed and must not run again.
    if (stream_flags_.done_reached(i, s.generation)) {
      view_.slots[i].word.store(shm::pack_completion(s.generation, ErrorCode::kOk),
                                std::memory_order_release);
      settled = true;
    }
  }
  if (settled) wake_waiters();
}

void Submissions::adopt_args_areas() {
  std::lock_guard lock(args_mutex_);
  for (const ArgsArena& arena : args_arenas_)
    registrations_.adopt(arena.buffer_id, arena.stride * slots_.size(), arena.mapping.fd());
}

UnfinishedRequests Submissions::unfinished(uint64_t comm_id) const {
  UnfinishedRequests open;
  std::lock_guard lock(slots_mutex_);
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    const SlotState& s = slots_[i];
    if (!s.in_use || !s.queued || s.entry.comm_id != comm_id || poll(i, s.generation)) continue;
    if (shm::is_point_to_point(s.entry.opcode))
      open.point_to_point[p2p_channel(s.entry)].insert(s.entry.seq);
    else
      open.collectives.insert(s.entry.seq);
  }
  return open;
}

void Submissions::resubmit(const std::map<uint64_t, uint64_t>& comm_ids) {
  producer_ =
      shm::RingProducer<shm::SubmitEntry>(view_.ring_control, view_.ring_entries, view_.ring_depth);
  std::lock_guard lock(slots_mutex_);
  std::vector<uint32_t> unfinished;
  for (uint32_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].in_use && slots_[i].queued && !poll(i, slots_[i].generation))
      unfinished.push_back(i);
  std::sort(unfinished.begin(), unfinished.end(),
            [&](uint32_t a, uint32_t b) { return slots_[a].ticket < slots_[b].ticket; });
  bool failed_here = false;
  for (uint32_t slot : unfinished) {
    SlotState& s = slots_[slot];
    shm::SubmitEntry entry = s.entry;
    const bool nop = entry.opcode == static_cast<uint32_t>(shm::Opcode::kNop);
    const auto id = comm_ids.find(entry.comm_id);
    if (!nop && id == comm_ids.end()) {
      const std::string why =
          "irisd restarted while this request was in flight, and its communicator was destroyed";
      char* text = view_.failures[slot].text;
      const std::size_t n = std::min(why.size(), shm::kFailureTextBytes - 1);
      std::memcpy(text, why.data(), n);
      text[n] = '\0';
      view_.slots[slot].word.store(shm::pack_completion(s.generation, ErrorCode::kDaemonGone),
                                   std::memory_order_release);
      stream_flags_.release(slot, s.generation);
      failed_here = true;
      continue;
    }
    if (!nop) entry.comm_id = id->second;
    entry.flags |= shm::kResubmitted;
    s.entry = entry;
    producer_.try_push(entry);  // room for every slot: the ring is empty and as deep
  }
  if (failed_here) wake_waiters();
}

}  // namespace iris
