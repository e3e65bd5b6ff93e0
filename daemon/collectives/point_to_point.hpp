// Point to point: sends and receives matched in order per (communicator, source, destination),
// as NCCL and MPI match them. Each rank's ring is popped in its program order and one session
// holds each rank, so the k-th send from s to d meets the k-th receive at d from s by queueing
// both sides of each (s, d) channel first in, first out: no sequence numbers, and a channel
// holds only what waits for its other side (nothing once they balance).
//
// A matched pair runs through the scheduler like any collective: on a two-rank pair
// communicator of the parent (sender rank 0, receiver rank 1, kSendRecv), one sequence number
// per match, so copies start once both sides are ready (a stream-ordered side once its stream
// reached the call), both complete only after the copy landed, and a failure (sizes that differ,
// an engine error) reaches both. A side its peer never matches fails with timeout after
// --p2p-timeout-ms; a rank leaving the parent fails every pending and later send and receive on
// it with peer_lost, as it fails the parent's collectives.
#pragma once

#include <functional>

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "daemon/collectives/collective_scheduler.hpp"
#include "daemon/collectives/communicator_registry.hpp"
#include "daemon/progress_loop.hpp"
#include "daemon/sessions/completer.hpp"

namespace iris::daemon {

// One end of a send or receive: its channel (rank `src` of a communicator sends to rank `dst`)
// and its rank in the pair (shm::kSenderInPair or shm::kReceiverInPair).
struct PairEnd {
  uint32_t src;
  uint32_t dst;
  uint32_t in_pair;
};

class PointToPoint final : public Poller {
 public:
  PointToPoint(CommunicatorRegistry& comms, CollectiveScheduler& scheduler, Completer& completer,
               Stats& stats, std::chrono::milliseconds timeout);
  ~PointToPoint() override;

  // One side, validated as its rank of the pair (kSenderInPair or kReceiverInPair).
  struct Side {
    CompletionTarget target;
    ValidatedRequest request;
    uint64_t position = 0;  // in its channel: 1, 2, ... (the client's count)
    std::chrono::steady_clock::time_point posted = std::chrono::steady_clock::now();
  };
  // Both sides of a match: their pair communicator and sequence number there.
  struct Match {
    Communicator& pair;
    uint64_t seq;
    Side send;
    Side recv;
  };
  // Rank `src` sends to rank `dst` of `parent` (is_send), or `dst` receives from `src`. Returns
  // the match when the other side was waiting; otherwise the side waits.
  std::optional<Match> post(const Communicator& parent, uint32_t src, uint32_t dst, bool is_send,
                            Side side);

  // Rank `rank` of the resumed `parent` came back and said how far its sends and receives got:
  // its peers' sides waiting here whose other side it had completed complete now, without a
  // copy (their bytes landed before the restart).
  void resumed_rank(const Communicator& parent, uint32_t rank);

  // The pair communicator with this id, or null (the arrivals look up stream-ordered sides).
  Communicator* find_pair(uint64_t pair_id) const;

  // The sides of `parent_id` waiting for their peer (for iris-ctl comms): each with its
  // channel, whether it is the send, its bytes and when it was posted.
  using WaitingVisitor =
      std::function<void(uint32_t src, uint32_t dst, bool is_send, uint64_t bytes,
                         std::chrono::steady_clock::time_point posted)>;
  void for_each_waiting(uint64_t parent_id, const WaitingVisitor& visit) const;

  // A rank left `parent_id` (`why` says who): every waiting side fails with `code`, and so does
  // every later one; matches in flight fail through the scheduler.
  void break_comm(uint64_t parent_id, ErrorCode code, const std::string& why);

  // Poller: sides past the timeout fail (the loop turns at least once a second, so within a
  // second of it); the state of communicators that are gone is dropped once no copy of theirs
  // runs.
  bool poll() override;
  // Its timeouts are met on the loop's wake-ups, at least once a second.
  bool try_enter_sleep() override { return true; }

 private:
  struct Channel {
    std::deque<Side> sends;
    std::deque<Side> recvs;
  };
  struct OfComm {
    Communicator pair;  // nranks 2; seq = the match number
    uint64_t matches = 0;
    std::map<std::pair<uint32_t, uint32_t>, Channel> channels;  // by (src, dst)
  };
  OfComm& of(const Communicator& parent);
  // Whether the other side of a side at `position` on channel (src, dst) completed under the
  // previous irisd (its rank resumed and said so).
  static bool done_by_peer(const Communicator& parent, uint32_t src, uint32_t dst, bool is_send,
                           uint64_t position);
  void fail_waiting(OfComm& state, ErrorCode code, const std::string& why);

  CommunicatorRegistry& comms_;
  CollectiveScheduler& scheduler_;
  Completer& completer_;
  Stats& stats_;
  std::chrono::milliseconds timeout_;
  std::unordered_map<uint64_t, std::unique_ptr<OfComm>> by_parent_;
  std::unordered_map<uint64_t, OfComm*> by_pair_id_;
  uint64_t next_pair_id_ = 1ull << 61;  // apart from the registry's and graph plans' ids
  std::chrono::steady_clock::time_point next_timeout_check_{};
};

}  // namespace iris::daemon
