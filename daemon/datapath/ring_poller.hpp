// The sessions' submission rings, polled: each entry popped goes to the arrivals. Before the
// progress loop sleeps it raises every session's need-wakeup flag (the client then rings the
// wake eventfd after a push) and looks once more, so a push racing with it is not slept through.
#pragma once

#include <functional>
#include <vector>

#include "daemon/datapath/arrivals.hpp"
#include "daemon/progress_loop.hpp"
#include "daemon/sessions/session_registry.hpp"

namespace iris::daemon {

class RingPoller final : public Poller {
 public:
  // `end_lost`: ends a session whose ring indices are corrupt (after the pass).
  RingPoller(SessionRegistry& sessions, Arrivals& arrivals, Stats& stats, TenantLog& log,
             std::function<void(uint64_t session_id)> end_lost);

  bool poll() override;
  bool try_enter_sleep() override;
  void exit_sleep() override;

 private:
  SessionRegistry& sessions_;
  Arrivals& arrivals_;
  Stats& stats_;
  TenantLog& log_;
  std::function<void(uint64_t)> end_lost_;
  std::vector<uint64_t> corrupt_;
};

}  // namespace iris::daemon
