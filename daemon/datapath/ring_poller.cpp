#include "daemon/datapath/ring_poller.hpp"

#include <spdlog/spdlog.h>

namespace iris::daemon {

RingPoller::RingPoller(SessionRegistry& sessions, Arrivals& arrivals, Stats& stats, TenantLog& log,
                       std::function<void(uint64_t)> end_lost)
    : sessions_(sessions),
      arrivals_(arrivals),
      stats_(stats),
      log_(log),
      end_lost_(std::move(end_lost)) {}

bool RingPoller::poll() {
  bool worked = false;
  for (Session* s : sessions_.list()) {
    if (!s->serving()) continue;
    shm::SubmitEntry entry;
    // At most a ring's worth per session per pass: one busy client cannot hold the others off.
    for (uint32_t n = 0; n < s->ring_depth(); ++n) {
      const auto r = s->ring().try_pop(entry);
      if (r == shm::PopResult::kEmpty) break;
      if (r == shm::PopResult::kCorrupt) {
        log_.log(spdlog::level::err, s->peer().uid, TenantLogKind::kSession,
                 "session {} (pid {}): ring indices corrupt; ending the session", s->id(),
                 s->peer().pid);
        corrupt_.push_back(s->id());
        break;
      }
      arrivals_.take(*s, entry);
      worked = true;
    }
    if (s->ring().take_found_full()) stats_.ring_full_total.fetch_add(1, std::memory_order_relaxed);
  }
  if (!corrupt_.empty()) {
    auto ending = std::move(corrupt_);
    corrupt_.clear();
    for (uint64_t id : ending) end_lost_(id);
  }
  return worked;
}

bool RingPoller::try_enter_sleep() {
  for (Session* s : sessions_.list()) s->set_daemon_needs_wakeup(true);
  for (Session* s : sessions_.list())
    if (s->serving() && s->ring_has_entries()) return false;
  return true;
}

void RingPoller::exit_sleep() {
  for (Session* s : sessions_.list()) s->set_daemon_needs_wakeup(false);
}

}  // namespace iris::daemon
