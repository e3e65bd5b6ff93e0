// The collectives a session captured into CUDA graphs: each is registered with irisd once as a
// graph plan in a plan slot (its completion word and done flag follow the ring's slots), and the
// graph holds only the slot's stream memory operations; a replay is admitted by irisd from the
// plan. Records what each plan was registered with, in order, so that a resume registers them
// again where they were (irisd matches plans across ranks in that order); a plan the next irisd
// refuses (memory it names freed since) is lost alone: its replays are let go by the daemon
// watch and check() reports it.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "client/gpu/stream_flags.hpp"
#include "client/src/communicators.hpp"
#include "client/src/session_link.hpp"
#include "client/src/submissions.hpp"
#include "iris/error.hpp"
#include "iris/shared/segment_layout.hpp"

namespace iris {

class CapturedPlans {
 public:
  CapturedPlans(const shm::SegmentView& view, SessionLink& link, Communicators& comms,
                Submissions& submissions, StreamFlagsMapping& stream_flags,
                std::chrono::nanoseconds submit_timeout)
      : view_(view),
        link_(link),
        comms_(comms),
        submissions_(submissions),
        stream_flags_(stream_flags),
        submit_timeout_(submit_timeout) {}

  // A free plan slot, held until release(). Throws kLimitExceeded when all are held.
  uint32_t take_slot();
  // The slot's index among the segment's completion slots and done flags.
  uint32_t flag_index(uint32_t plan_slot) const { return view_.ring_depth + plan_slot; }
  // Registers `entry` of `comm` as the plan of `plan_slot` (all-to-all-v's `v_args` staged for
  // irisd to read), recorded for resumes. Throws what irisd refused; the slot is then free again.
  void add(uint32_t plan_slot, shm::SubmitEntry entry, CommRank& comm,
           std::span<const uint64_t> v_args);
  // The plan's graph was destroyed: irisd is told, the slot freed. A failure of its last replay
  // stays reported by check() once.
  void release(uint32_t plan_slot);
  // Throws the failure of a plan's last replay (Client::check_graphs).
  void check();
  // Lets every replay waiting on a plan go on (irisd is gone: no one writes the done flags). A
  // replay waits for its flag (1) and then resets it: the daemon watch calls this again every
  // few milliseconds, so later replays go on too.
  void release_waits();
  // The same for the lost plans only; false when none is left (their graphs were destroyed).
  bool release_lost();

  // The resume step: every plan registered again, under the communicators' new ids, in the
  // order they were first; true when one was lost (release_lost() then has work).
  bool resume(const std::map<uint64_t, uint64_t>& comm_ids);
  // The session is back: the records hold the new ids from now on.
  void carry(const std::map<uint64_t, uint64_t>& comm_ids);

 private:
  struct Record {
    shm::SubmitEntry entry{};
    uint64_t order = 0;  // 0: a slot not (yet) registered
    std::vector<uint64_t> v_args;
    // Why the irisd that came back after a restart refused it.
    std::optional<Error> lost;
  };
  // Registers a plan with irisd: resuming, on the resume's connection (`comm` null, the entry's
  // id already the next irisd's); else naming `comm` by the id of the irisd it goes to, written
  // into `entry`. Returns the connection it was answered on.
  uint64_t send(uint32_t plan_slot, shm::SubmitEntry& entry, std::span<const uint64_t> v_args,
                CommRank* comm);
  // The failure of a plan slot's last replay, if it failed.
  std::optional<Error> failure(uint32_t plan_slot) const;

  const shm::SegmentView& view_;
  SessionLink& link_;
  Communicators& comms_;
  Submissions& submissions_;
  StreamFlagsMapping& stream_flags_;
  const std::chrono::nanoseconds submit_timeout_;
  mutable std::mutex mutex_;
  std::vector<bool> used_ = std::vector<bool>(shm::kGraphPlanSlots);
  std::vector<Record> records_ = std::vector<Record>(shm::kGraphPlanSlots);
  uint64_t next_order_ = 1;
  std::optional<Error> released_failure_;  // of a plan released since check() last looked
};

}  // namespace iris
