// NCCL's watchdog, in irisd: a communicator made with an operation timeout (CommInitRequest's
// op_timeout_ms; the torch backend passes its group's timeout) whose oldest collective has
// waited that long for a rank is broken with kTimeout naming the ranks it waits on. Every
// waiting request then gets its failure, so GPU streams blocked on irisd go on, and the job
// learns which rank is stuck instead of hanging. (Sends and receives end alone at the same
// timeout: PointToPoint.)
#pragma once

#include <chrono>
#include <string>

#include "daemon/progress_loop.hpp"

namespace iris::daemon {

class CollectiveScheduler;
class CommunicatorRegistry;
struct Communicator;

class CommWatchdog : public Poller {
 public:
  CommWatchdog(CommunicatorRegistry& comms, CollectiveScheduler& scheduler)
      : comms_(comms), scheduler_(scheduler) {}
  // Looks every 100 ms; true when it broke a communicator (its clients are woken next pass).
  bool poll() override;
  // Its checks come on the loop's wake-ups, at least once a second.
  bool try_enter_sleep() override { return true; }

  // Why `comm`'s collective `seq`, waiting past the timeout for the ranks not yet arrived, broke
  // it: the words every rank's client shows.
  static std::string why(const Communicator& comm, uint64_t seq);

 private:
  CommunicatorRegistry& comms_;
  CollectiveScheduler& scheduler_;
  std::chrono::steady_clock::time_point next_check_{};
};

}  // namespace iris::daemon
