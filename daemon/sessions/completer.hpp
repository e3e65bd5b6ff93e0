// Where a rank's request ends: the completer writes its result into the session's completion
// slot (and, for a failure, why), the GPU done flag its stream waits on, gives back the
// session's pending count, and wakes the session's sleeping threads once per pass of the
// progress loop. The scheduler, the arrivals and the front doors' calls all complete through it,
// so a request's end is written in one place.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/engines/engine.hpp"
#include "daemon/operations/tenant_log.hpp"
#include "daemon/progress_loop.hpp"
#include "daemon/sessions/completion_target.hpp"
#include "daemon/sessions/session_registry.hpp"
#include "daemon/stats.hpp"
#include "iris/error_code.hpp"

namespace iris::daemon {

class Completer final : public Poller {
 public:
  Completer(SessionRegistry& sessions, Engine& engine, Stats& stats, TenantLog& log);

  // Writes the completion; nothing when the target's session is gone.
  void complete(const CompletionTarget& target, ErrorCode code, std::string why = {});
  // irisd is stopping: from now on no completion is written. What was still in flight stays
  // unfinished in the clients' slots, so they submit it again to the next irisd when their
  // sessions resume (the ranks leaving as irisd ends their sessions would otherwise fail it as
  // peer_lost); clients that do not resume learn from their connection closing that irisd went.
  void stop() { stopped_ = true; }

  // Poller: wakes the sessions completed into since the last pass (never counts as work).
  bool poll() override;
  // Not while a session completed into later in the pass (by a poller after this one) still
  // waits for its wake.
  bool try_enter_sleep() override { return to_wake_.empty(); }

 private:
  SessionRegistry& sessions_;
  Engine& engine_;
  Stats& stats_;
  TenantLog& log_;
  std::vector<uint64_t> to_wake_;  // session ids; a session may end before its wake
  bool stopped_ = false;
};

}  // namespace iris::daemon
