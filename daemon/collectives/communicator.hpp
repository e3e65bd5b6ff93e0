// A communicator as the daemon sees it: its ranks (sessions), the next sequence number each rank
// must submit, and the collectives in flight keyed by sequence number.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "daemon/collectives/collective.hpp"
#include "daemon/collectives/node_layout.hpp"
#include "daemon/engines/fair_share.hpp"
#include "daemon/log_limiter.hpp"
#include "iris/error_code.hpp"

namespace iris::daemon {

// What the rank that creates a communicator chooses for it.
struct CommSettings {
  // Past it a collective breaks the communicator, a send or receive fails (0: none).
  std::chrono::milliseconds op_timeout{0};
  RequestedClass traffic_class = RequestedClass::kAuto;
  // Its creator may have latency at any size (--latency-uids, --latency-group).
  bool latency_granted = false;
};

struct Communicator {
  uint64_t id = 0;
  std::string key;
  uint32_t nranks = 0;
  uid_t uid = 0;
  // Handed to its ranks at creation; a rank resuming it after irisd restarted presents it, and
  // resumes only the communicator made with it (a tenant who knows the key cannot squat it).
  std::string secret;
  // Where CommunicatorRegistry finds it while it accepts ranks (its scope, key and kind).
  std::string lookup;
  // irisd memory this communicator's state holds, counted against the uids that caused it
  // (max_comm_bytes_per_uid) until it goes.
  std::vector<std::pair<uid_t, uint64_t>> charges;
  std::vector<std::optional<uint64_t>> members;  // session id by rank
  std::vector<uint64_t> next_seq;                // by rank; the first collective is seq 1
  // Made by ranks coming back after irisd restarted: each resumed rank's first sequence number
  // here (0: not resumed). It completed every collective before that one under the previous
  // irisd, so it takes no part in their re-runs (see CollectiveScheduler::resumed_rank).
  bool resumed = false;
  std::vector<uint64_t> resumed_from;
  std::vector<std::set<uint64_t>> resumed_done;  // by rank: completed after resumed_from too
  // A rank resumed past seq 1, or with completions after it: collectives ran before the restart.
  bool resumed_after_collectives = false;
  // Whether rank `rank` completed collective `seq` under the previous irisd.
  bool done_before_restart(uint32_t rank, uint64_t seq) const {
    return resumed && (seq < resumed_from[rank] || resumed_done[rank].count(seq) != 0);
  }
  // The sequence number rank `rank` submits after `seq` (skipping those it completed).
  uint64_t seq_after(uint32_t rank, uint64_t seq) const {
    uint64_t next = seq + 1;
    while (resumed && resumed_done[rank].count(next) != 0) ++next;
    return next;
  }
  // Sends and receives a resumed rank completed under the previous irisd, by channel (src, dst):
  // a side the peer resubmits there completes without a copy when the rank's side did.
  struct ChannelDone {
    uint64_t below = 1;  // every position below it
    std::set<uint64_t> after;
    bool covers(uint64_t position) const { return position < below || after.count(position) != 0; }
  };
  std::map<std::pair<uint32_t, uint32_t>, ChannelDone> sends_done, recvs_done;
  // Until every rank is back: when those still missing fail the communicator (peer_lost).
  std::optional<std::chrono::steady_clock::time_point> resume_deadline;
  std::map<uint64_t, Collective> in_flight;
  // Chosen by the rank that created it (CommInitRequest.op_timeout_ms): past it a collective
  // waiting for a rank breaks the communicator, and a waiting send or receive fails (0: none).
  std::chrono::milliseconds op_timeout{0};
  // Where its copies wait while users share the engines (CopyDispatcher::class_of).
  RequestedClass traffic_class = RequestedClass::kAuto;
  bool latency_granted = false;  // CommSettings::latency_granted of its creator
  bool broken = false;           // a rank died or left: every collective fails with broken_code
  ErrorCode broken_code = ErrorCode::kOk;
  std::string broken_why;
  uint64_t completed = 0;
  // The nodes of a communicator that spans several daemons; null when all its ranks are here.
  std::shared_ptr<const NodeLayout> layout;
  // --log-level debug traces every collective's arrivals, start and end: many more lines a
  // second, still bounded.
  LogLimiter trace_limit{1000, 2000};

  bool is_local(uint32_t rank) const { return !layout || layout->local(rank); }
  // No collective has completed on it, here or under the previous irisd: a rank that joins anew
  // and one that resumes at seq 1 with nothing completed are then the same.
  bool before_first_collective() const { return completed == 0 && !resumed_after_collectives; }

  uint32_t joined() const {
    uint32_t n = 0;
    for (const auto& m : members) n += m.has_value() ? 1 : 0;
    return n;
  }
  // Whether every rank of this node has joined (all ranks, for a communicator of one node).
  bool all_local_joined() const {
    for (uint32_t r = 0; r < nranks; ++r)
      if (is_local(r) && !members[r]) return false;
    return true;
  }
  // Whether every rank of this node completed collective `seq` under the previous irisd.
  bool all_local_done_before_restart(uint64_t seq) const {
    if (!resumed) return false;
    for (uint32_t r = 0; r < nranks; ++r)
      if (is_local(r) && !done_before_restart(r, seq)) return false;
    return true;
  }
};

}  // namespace iris::daemon
