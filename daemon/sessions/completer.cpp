#include "daemon/sessions/completer.hpp"

#include <spdlog/spdlog.h>

#include "iris/error.hpp"

namespace iris::daemon {

Completer::Completer(SessionRegistry& sessions, Engine& engine, Stats& stats, TenantLog& log)
    : sessions_(sessions), engine_(engine), stats_(stats), log_(log) {}

void Completer::complete(const CompletionTarget& target, ErrorCode code, std::string why) {
  Session* s = sessions_.find(target.session_id);
  if (s == nullptr || stopped_) return;  // the rank's session is gone, or irisd is stopping
  if (target.graph_plan) s->clear_plan_ready(target.slot - s->ring_depth());
  if (s->device_done_flags) {
    // The caller's stream waits for this flag: a write that cannot be issued is the request's
    // error, never a success the stream would wait on for ever.
    try {
      engine_.write_device_word(s->device_done_flags->device,
                                s->device_done_flags->base + target.slot * sizeof(uint32_t),
                                target.graph_plan ? 1u : target.generation);
    } catch (const Error& e) {
      log_.log(spdlog::level::err, s->peer().uid, TenantLogKind::kSession,
               "session {} (pid {}): stream done flag of slot {} not written: {}", s->id(),
               s->peer().pid, target.slot, e.message());
      stats_.count_error(ErrorCode::kEngineError);
      if (code == ErrorCode::kOk) {
        code = ErrorCode::kEngineError;
        why = "irisd could not write the stream's done flag: " + e.message();
      }
    }
  }
  if (s->complete(target.slot, target.generation, code, why)) to_wake_.push_back(s->id());
  if (!target.graph_plan) --s->pending;
}

bool Completer::poll() {
  for (uint64_t id : to_wake_)
    if (Session* s = sessions_.find(id)) s->flush_wake();
  to_wake_.clear();
  return false;
}

}  // namespace iris::daemon
