// The session's submissions: ring, completion slots, argument areas and waits (see
// submissions.cpp). One lock for the ring (its one producer) and one for the slots; the resume
// holds the ring's throughout (hold_ring) and runs its steps in order.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "client/gpu/stream_flags.hpp"
#include "client/src/communicators.hpp"
#include "client/src/registrations.hpp"
#include "client/src/session_link.hpp"
#include "iris/error.hpp"
#include "iris/shared/descriptor.hpp"
#include "iris/shared/segment_layout.hpp"
#include "iris/shared/spsc_ring.hpp"

namespace iris {

class Submissions {
 public:
  using Clock = std::chrono::steady_clock;
  // A request's result once its completion slot went back to the pool before its Request looked
  // (acquire_slot takes back completed slots when none is free, so that Requests kept unwaited
  // never block later calls); held by the Request's state, written through the slot's.
  struct Outcome {
    std::atomic<bool> ready{false};  // release: code and why are set
    ErrorCode code = ErrorCode::kOk;
    std::string why;
  };

  Submissions(const shm::SegmentView& view, SessionLink& link, Registrations& registrations,
              StreamFlagsMapping& stream_flags, std::chrono::microseconds wait_spin);

  // A free completion slot for a request whose result `outcome` receives if the slot is taken
  // back before the request looks (null: a slot that only stages arguments), and its generation
  // now (`generation`). Throws kBusy at `deadline`, kDaemonGone.
  uint32_t acquire_slot(Clock::time_point deadline, Outcome* outcome,
                        uint32_t* generation = nullptr);
  // A slot whose request never reached the ring (or only staged arguments) back to the pool.
  void release_slot(uint32_t slot);
  // Copies `values` into the argument area of `slot` and names it in `entry`. One area per
  // completion slot, so a request's arguments stay put until it completes (irisd copies them
  // out when it pops the entry); areas grow (new buffer) when a larger communicator needs more.
  void stage_args(uint32_t slot, std::span<const uint64_t> values, shm::SubmitEntry& entry);
  // Pushes `entry` of `slot` into the ring and rings irisd's doorbell; `comm`, when given,
  // supplies entry.comm_id (and with `sequenced`, entry.seq; a send's or receive's position in
  // its channel) under the ring's lock, so that a communicator's sequence numbers enter the ring
  // in order and a resumed session's new ids are used. Throws kBusy at `deadline` (the slot back
  // in the pool), kDaemonGone.
  void push(shm::SubmitEntry entry, CommRank* comm, bool sequenced, uint32_t slot,
            Clock::time_point deadline);
  void ring_doorbell();

  // The completion of `slot` for `generation`, if it came.
  std::optional<ErrorCode> poll(uint32_t slot, uint32_t generation) const;
  // Waits for it until `deadline`, or until `outcome` is ready (its slot was taken back);
  // nullopt on timeout. Throws kDaemonGone.
  std::optional<ErrorCode> wait(uint32_t slot, uint32_t generation, Clock::time_point deadline,
                                const Outcome* outcome = nullptr);
  // Completed, or its slot holds another request now.
  bool finished(uint32_t slot, uint32_t generation) const;
  // The daemon's reason for the failure completed in `slot` (empty when it gave none).
  std::string failure_text(uint32_t slot) const;
  // The Request saw `code` in its slot (or found its outcome ready): its result, and the slot
  // back in the pool unless acquire_slot already took it.
  std::pair<ErrorCode, std::string> collect(uint32_t slot, const Outcome& outcome, ErrorCode code);
  // The Request went away before its completion: the slot is taken back once it completes
  // (unless it was already).
  void abandon(uint32_t slot, const Outcome& outcome);
  // Counts a request libiris refused before it reached irisd (shown by `iris-ctl sessions`).
  void count_rejection();
  // Sleeps until the daemon publishes completions, `deadline`, or a liveness check is due;
  // returns at once if `ready` already holds.
  void sleep_for_completions(Clock::time_point deadline, const std::function<bool()>& ready) const;
  // Wakes every thread sleeping for completions (they look again).
  void wake_waiters();
  // Lets GPU streams waiting on the slots' done flags go on (no irisd will write them).
  void release_stream_waits();

  // The resume's steps. hold_ring(): no entry reaches the ring until the lock returned is
  // released, and the ring is empty (the next irisd reads it from there).
  std::unique_lock<std::mutex> hold_ring();
  // Stream-ordered requests whose done flag the previous irisd wrote: completed (not re-run).
  void settle_stream_completions();
  // The argument areas handed to the next irisd.
  void adopt_args_areas();
  // What is unfinished of communicator `comm_id` (with the ring held).
  UnfinishedRequests unfinished(uint64_t comm_id) const;
  // The unfinished entries into the ring again, in the order they were pushed, their
  // communicators' new ids in them; those of a communicator no longer there fail here.
  void resubmit(const std::map<uint64_t, uint64_t>& comm_ids);

 private:
  struct SlotState {
    uint32_t generation = 0;
    bool in_use = false;
    // Its Request's, while the request is in flight; null once the Request went away before the
    // completion arrived (abandon).
    Outcome* outcome = nullptr;
    // Set under submit_mutex_ just before its entry goes into the ring (once there, it may
    // complete and its slot be taken back before the submitting thread runs again), and read
    // only under it: the entry as pushed, and its place in the order of pushes, to submit it
    // again if irisd restarts before it completes.
    bool queued = false;
    uint64_t ticket = 0;
    shm::SubmitEntry entry{};
  };
  // With slots_mutex_ held: a completed slot back to the pool, its result kept in its outcome.
  void take_back_completed(uint32_t slot, ErrorCode code);

  const shm::SegmentView& view_;
  SessionLink& link_;
  Registrations& registrations_;
  StreamFlagsMapping& stream_flags_;
  const std::chrono::microseconds wait_spin_;

  std::mutex submit_mutex_;  // process-local: the ring has one producer per session
  shm::RingProducer<shm::SubmitEntry> producer_;
  uint64_t next_ticket_ = 0;  // under submit_mutex_
  mutable std::mutex slots_mutex_;
  std::vector<SlotState> slots_;
  std::vector<uint32_t> free_slots_;

  struct ArgsArena {
    uint64_t buffer_id;
    std::size_t stride;  // bytes per slot
    shm::ShmSegment mapping;
  };
  std::mutex args_mutex_;
  // The last is current; earlier ones stay mapped for requests that may still name them (at
  // most one per doubling of the stride).
  std::vector<ArgsArena> args_arenas_;
};

}  // namespace iris
