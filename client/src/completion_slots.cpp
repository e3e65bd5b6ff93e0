// Client::Impl's ring and completion slots: submit() pushes an entry (its slot taken from the
// pool, all-to-all-v's arguments staged), wait() and poll() read the slot's completion word,
// spinning briefly and then sleeping on the segment's futex (Request::wait and Request::test
// come here), and the slot goes back to the pool once its Request has seen the result.
#include "client/src/client_impl.hpp"

#include <sched.h>
#include <unistd.h>

#include <sys/mman.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "client/src/group_waits.hpp"
#include "client/src/request_impl.hpp"
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

clock::time_point deadline_after(std::chrono::nanoseconds timeout) {
  const auto now = clock::now();
  if (timeout >= clock::time_point::max() - now) return clock::time_point::max();
  return now + std::chrono::duration_cast<clock::duration>(timeout);
}

void Client::Impl::sleep_for_completions(clock::time_point deadline,
                                         const std::function<bool()>& ready) const {
  // The epoch is read before `ready` is checked: a completion published in between changes it,
  // and the futex then returns at once instead of sleeping through the completion.
  const uint32_t epoch = view.header->completion_epoch.load(std::memory_order_acquire);
  view.header->client_waiters.fetch_add(1, std::memory_order_seq_cst);
  if (!ready()) {
    const auto slice = std::min<clock::duration>(kLivenessInterval, deadline - clock::now());
    shm::futex_wait(view.header->completion_epoch, epoch, slice);
  }
  view.header->client_waiters.fetch_sub(1, std::memory_order_seq_cst);
}

std::optional<ErrorCode> Client::Impl::poll(uint32_t slot, uint32_t generation) const {
  const uint64_t word = view.slots[slot].word.load(std::memory_order_acquire);
  if (!shm::completion_matches(word, generation)) return std::nullopt;
  return shm::completion_code(word);
}

std::string Client::Impl::failure_text(uint32_t slot) const {
  const char* text = view.failures[slot].text;
  return std::string(text, ::strnlen(text, shm::kFailureTextBytes));
}

void Client::Impl::count_rejection() {
  view.header->client_rejections.fetch_add(1, std::memory_order_relaxed);
}

std::optional<ErrorCode> Client::Impl::wait(uint32_t slot, uint32_t generation,
                                            clock::time_point deadline, const Outcome* outcome) {
  check_owner();
  // Taken back while we waited: the slot may already hold another request's completion.
  auto result = [&]() -> std::optional<ErrorCode> {
    if (outcome != nullptr && outcome->ready.load(std::memory_order_acquire)) return outcome->code;
    return poll(slot, generation);
  };
  const auto start = clock::now();
  const auto spin_until = std::min(deadline, start + wait_spin);
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
    link->throw_if_gone();
    if (clock::now() >= deadline) return std::nullopt;
    sleep_for_completions(deadline, [&] { return result().has_value(); });
  }
}

uint32_t Client::Impl::acquire_slot(clock::time_point deadline, Outcome* outcome) {
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
        return slot;
      }
    }
    link->throw_if_gone();
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

void Client::Impl::release_slot(uint32_t slot) {
  std::lock_guard lock(slots_mutex_);
  SlotState& s = slots_[slot];
  s.in_use = false;
  s.outcome = nullptr;
  free_slots_.push_back(slot);
}

void Client::Impl::take_back_completed(uint32_t slot, ErrorCode code) {
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

std::pair<ErrorCode, std::string> Client::Impl::collect(uint32_t slot, const Outcome& outcome,
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

void Client::Impl::abandon(uint32_t slot, const Outcome& outcome) {
  std::lock_guard lock(slots_mutex_);
  // Taken back already (the outcome is ready, the slot may hold another request): nothing to do.
  if (outcome.ready.load(std::memory_order_acquire)) return;
  slots_[slot].outcome = nullptr;
}

void Client::Impl::ring_doorbell() {
  // Pairs with the daemon's store of daemon_needs_wakeup before its last look at the ring: the
  // push above must be visible before the flag is read. A read-modify-write of the flag orders
  // them as a full fence would (a locked instruction on x86, no dearer than the fence), and
  // ThreadSanitizer, which does not model fences, follows it.
  if (view.header->daemon_needs_wakeup.fetch_add(0, std::memory_order_seq_cst) != 0)
    link->wake_irisd();
}

void Client::Impl::stage_args(uint32_t slot, std::span<const uint64_t> values,
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
        registrations->allocate_host(stride * slots_.size(), "allocate argument area");
    lock.lock();
    if (!link->answered_by_current_irisd(allocation.connection)) continue;
    if (!args_arenas_.empty() && args_arenas_.back().stride >= stride) {
      // Another thread's came first.
      lock.unlock();
      try {
        registrations->deregister(allocation.id, allocation.connection);
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

Request Client::Impl::submit(shm::SubmitEntry entry, CommRank* comm, bool sequenced,
                             std::optional<GpuStream> stream, std::optional<StreamCopy> own_block,
                             std::span<const uint64_t> v_args, HeldRegistrations* held) {
  check_owner();
  // Only the cheap check here: a crashed daemon is noticed by the wait.
  if (link->detached()) throw Error(ErrorCode::kDaemonGone, "this client has detached");
  check_daemon();
  // Under capture the call becomes a graph plan: no ring slot, no ring entry.
  if (stream && stream_flags->capturing(*stream)) {
    if (comm == nullptr)
      throw Error(ErrorCode::kInvalidArgument, "only a communicator's calls can be captured");
    capture_graph_plan(entry, *comm, *stream, own_block, v_args);
    if (held != nullptr) held->submitted(std::nullopt);  // the graph replays them
    return Request();
  }
  const auto deadline = deadline_after(options.submit_timeout);
  auto request = std::make_shared<Request::Impl>(shared_from_this());
  const uint32_t slot = acquire_slot(deadline, &request->outcome);
  const uint32_t generation = slots_[slot].generation;
  request->slot = slot;
  request->generation = generation;
  entry.slot = slot;
  entry.generation = generation;
  if (!v_args.empty()) {
    try {
      stage_args(slot, v_args, entry);
    } catch (const Error&) {
      release_slot(slot);
      throw;
    }
  }
  if (stream) {
    try {
      if (own_block)
        stream_flags->enqueue_copy(*stream, own_block->dst, own_block->src, own_block->bytes);
      stream_flags->enqueue_ready(*stream, slot, generation);
    } catch (const Error&) {
      release_slot(slot);
      throw;
    }
  }
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
      if (daemon_gone() || clock::now() >= deadline) {
        lock.unlock();
        release_slot(slot);
        link->throw_if_gone();
        throw Error(ErrorCode::kBusy, "submission ring full: irisd is not keeping up");
      }
      if (link->resuming()) {
        // The resume refills the ring and needs this lock.
        lock.unlock();
        link->wait_while_resuming(deadline);
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
  request->in_flight = true;
  if (held != nullptr) held->submitted(GpuRegistrationCache::Use{slot, generation});
  ring_doorbell();
  // After the push: the request is in flight whatever happens here, and a failure to enqueue
  // the wait is reported while the Request still tracks the slot.
  Request submitted(std::move(request));
  if (stream && in_group()) {
    defer_to_group([self = shared_from_this(), s = *stream, slot, generation] {
      self->stream_flags->enqueue_wait_done(s, slot, generation);
    });
  } else if (stream) {
    stream_flags->enqueue_wait_done(*stream, slot, generation);
  }
  return submitted;
}

}  // namespace iris
