// Where a request enters the data path. A ring entry (or the entry a graph capture registers) is
// admitted here once: its completion slot and the session's pending count checked, its
// communicator and rank found, its sequence number checked, and its arguments validated against
// the rank's buffers (request_validation.hpp). A stream-ordered request then waits here until
// its GPU stream reaches the call (the stream's ready flag), polled rather than waited for on
// the GPU: a daemon stream blocked on one rank's flag would hold up every later copy on it.
// Sends and receives are matched first (point_to_point.hpp), each matched pair then passing the
// same stream-ordered gate. What passes goes to the scheduler; what fails is completed (every
// rank of the collective learns why).
#pragma once

#include <chrono>
#include <vector>

#include "daemon/collectives/collective_scheduler.hpp"
#include "daemon/collectives/communicator_registry.hpp"
#include "daemon/collectives/point_to_point.hpp"
#include "daemon/progress_loop.hpp"
#include "daemon/sessions/completer.hpp"
#include "daemon/sessions/session_registry.hpp"

namespace iris::daemon {

class Arrivals final : public Poller {
 public:
  Arrivals(SessionRegistry& sessions, CommunicatorRegistry& comms, CollectiveScheduler& scheduler,
           PointToPoint& p2p, Completer& completer, Stats& stats, TenantLog& log);

  // A ring entry of session `s`: it gets exactly one completion, now or later.
  void take(Session& s, const shm::SubmitEntry& e);

  // The entry a graph capture registers (graph_plans.hpp), admitted as a ring entry would be
  // (but without a sequence number: replays are numbered by the plan). Throws iris::Error
  // naming what is wrong with it.
  struct Admitted {
    const Communicator& comm;
    uint32_t rank;
    ValidatedRequest request;
    std::optional<PairEnd> pair;  // a send or receive: its end, validated as that rank of a pair
  };
  Admitted admit_graph_entry(Session& s, const shm::SubmitEntry& e);

  // Poller: stream-ordered requests whose stream has reached the call go to the scheduler.
  bool poll() override;
  bool try_enter_sleep() override { return awaiting_stream_.empty(); }

 private:
  // A request of `s` that fails on its own (it named no communicator of its session, say).
  void refuse(Session& s, const CompletionTarget& target, ErrorCode code, const std::string& why);
  void take_collective(Session& s, const shm::SubmitEntry& e, const CompletionTarget& target);
  void take_point_to_point(Session& s, const shm::SubmitEntry& e, const CompletionTarget& target);
  // A send or receive entry of rank `rank` of `comm`: its end, and the entry validated as that
  // rank of a two-rank kSendRecv.
  struct PairSide {
    PairEnd end;
    ValidatedRequest request;
  };
  std::variant<PairSide, ValidationError> pair_side(Session& s, const shm::SubmitEntry& e,
                                                    const Communicator& comm, uint32_t rank);
  // A validated request of rank `rank` at `seq` of `comm`: to the scheduler now, or once its
  // stream reaches the call.
  void start_when_ready(Session& s, Communicator& comm, uint32_t rank, uint64_t seq,
                        const CompletionTarget& target, ValidatedRequest&& request);
  // A communicator of the registry, or a point-to-point pair communicator.
  Communicator* find_comm(uint64_t id) const;
  // The session's rank in the entry's communicator, or why it has none.
  struct Member {
    Communicator* comm;
    uint32_t rank;
  };
  std::variant<Member, ValidationError> member_of(Session& s, const shm::SubmitEntry& e);
  // A warning caused by a session's own requests, rate-limited per user.
  template <typename... Args>
  void session_warn(Session& s, fmt::format_string<Args...> format, Args&&... args);

  SessionRegistry& sessions_;
  CommunicatorRegistry& comms_;
  CollectiveScheduler& scheduler_;
  PointToPoint& p2p_;
  Completer& completer_;
  Stats& stats_;
  TenantLog& log_;

  // A validated stream-ordered request, waiting for its rank's GPU stream to reach the call.
  struct AwaitingStream {
    CompletionTarget target;
    uint64_t comm_id;
    uint32_t rank;
    uint64_t seq;
    ValidatedRequest request;
    std::chrono::steady_clock::time_point seen;  // when its ring entry was popped
  };
  std::vector<AwaitingStream> awaiting_stream_;
};

}  // namespace iris::daemon
