#include "client/src/captured_plans.hpp"

#include <algorithm>

#include "client/src/debug_log.hpp"
#include "client/src/failure_text.hpp"

namespace iris {

uint32_t CapturedPlans::take_slot() {
  std::lock_guard lock(mutex_);
  uint32_t plan_slot = 0;
  while (plan_slot < used_.size() && used_[plan_slot]) ++plan_slot;
  if (plan_slot == used_.size())
    throw Error(ErrorCode::kLimitExceeded,
                "this client already holds " + std::to_string(shm::kGraphPlanSlots) +
                    " collectives captured in CUDA graphs; destroy some graphs first");
  used_[plan_slot] = true;
  return plan_slot;
}

void CapturedPlans::add(uint32_t plan_slot, shm::SubmitEntry entry, CommRank& comm,
                        std::span<const uint64_t> v_args) {
  entry.slot = 0;
  entry.generation = 0;
  entry.seq = 0;
  try {
    // An irisd gone since the answer (perhaps after the resume read the plans) gets it again.
    link_.call_and_record(
        mutex_, [&] { return send(plan_slot, entry, v_args, &comm); },
        [&](uint64_t) {
          records_[plan_slot] = {entry, next_order_++, {v_args.begin(), v_args.end()}, {}};
        });
  } catch (const Error&) {
    std::lock_guard lock(mutex_);
    used_[plan_slot] = false;
    throw;
  }
}

uint64_t CapturedPlans::send(uint32_t plan_slot, shm::SubmitEntry& entry,
                             std::span<const uint64_t> v_args, CommRank* comm) {
  const bool resuming = comm == nullptr;
  // All-to-all-v's counts: staged in a ring slot's area for irisd to read while it registers
  // the plan (it keeps a copy), then the slot is free again.
  std::optional<uint32_t> staging;
  if (!v_args.empty()) {
    staging = submissions_.acquire_slot(deadline_after(submit_timeout_), nullptr);
    try {
      submissions_.stage_args(*staging, v_args, entry);
    } catch (const Error&) {
      submissions_.release_slot(*staging);
      throw;
    }
  }
  auto plan = [&](v1::SessionRequest& request, uint64_t comm_id) {
    entry.comm_id = comm_id;
    request.mutable_register_plan()->set_entry(
        std::string(reinterpret_cast<const char*>(&entry), sizeof(entry)));
    request.mutable_register_plan()->set_plan_slot(plan_slot);
  };
  uint64_t connection = 0;
  try {
    if (resuming) {
      v1::SessionRequest request;
      plan(request, entry.comm_id);
      // The replays irisd completed: the plan slot's completion word carries the last one's.
      const uint64_t word = view_.slots[flag_index(plan_slot)].word.load(std::memory_order_acquire);
      request.mutable_register_plan()->set_resumed(true);
      request.mutable_register_plan()->set_completed_replays((word & 1u) != 0 ? word >> 32 : 0);
      link_.resume_call(request, "register a CUDA graph's collective again");
      connection = link_.current_connection();
    } else {
      comms_.call_naming(*comm, plan, "capture a collective into a CUDA graph", &connection);
    }
  } catch (const Error&) {
    if (staging) submissions_.release_slot(*staging);
    throw;
  }
  if (staging) submissions_.release_slot(*staging);
  return connection;
}

void CapturedPlans::release(uint32_t plan_slot) {
  v1::SessionRequest request;
  request.mutable_release_plan()->set_plan_slot(plan_slot);
  try {
    if (!link_.gone()) link_.session_call(request, "release a CUDA graph's collective");
  } catch (const Error&) {
    // The session is ending or irisd is gone: the plan goes with the session.
  }
  // irisd no longer writes the slot: a failure of its last replay stays reported by check()
  // although the graph is gone (it is often destroyed right after its stream's synchronize,
  // before the host looks).
  std::optional<Error> failed = failure(plan_slot);
  std::lock_guard lock(mutex_);
  if (failed && !released_failure_) released_failure_ = std::move(failed);
  used_[plan_slot] = false;
  records_[plan_slot] = {};
}

std::optional<Error> CapturedPlans::failure(uint32_t plan_slot) const {
  {
    std::lock_guard lock(mutex_);
    if (records_[plan_slot].lost) return records_[plan_slot].lost;
  }
  const uint32_t index = flag_index(plan_slot);
  const uint64_t word = view_.slots[index].word.load(std::memory_order_acquire);
  const ErrorCode code = shm::completion_code(word);
  if ((word & 1u) == 0 || code == ErrorCode::kOk) return std::nullopt;  // none yet, or it went well
  const std::string why = submissions_.failure_text(index);
  return Error(code, "a collective captured into a CUDA graph failed in replay " +
                         std::to_string(static_cast<uint32_t>(word >> 32)) + ": " +
                         (why.empty() ? describe_failure(code) : why));
}

void CapturedPlans::check() {
  std::vector<uint32_t> held;
  {
    std::lock_guard lock(mutex_);
    if (released_failure_) {
      // Reported once: the graph that failed is gone.
      const Error failed = *released_failure_;
      released_failure_.reset();
      throw failed;
    }
    for (uint32_t p = 0; p < used_.size(); ++p)
      if (used_[p]) held.push_back(p);
  }
  for (uint32_t p : held)
    if (auto failed = failure(p)) throw *failed;
}

void CapturedPlans::release_waits() {
  std::lock_guard lock(mutex_);
  for (uint32_t p = 0; p < used_.size(); ++p)
    if (used_[p]) stream_flags_.release(flag_index(p), 1);
}

bool CapturedPlans::release_lost() {
  std::lock_guard lock(mutex_);
  bool any = false;
  for (uint32_t p = 0; p < used_.size(); ++p) {
    if (!used_[p] || !records_[p].lost) continue;
    stream_flags_.release(flag_index(p), 1);
    any = true;
  }
  return any;
}

bool CapturedPlans::resume(const std::map<uint64_t, uint64_t>& comm_ids) {
  std::vector<std::pair<uint32_t, Record>> plans;
  {
    std::lock_guard lock(mutex_);
    for (uint32_t p = 0; p < records_.size(); ++p)
      if (used_[p] && records_[p].order != 0) plans.emplace_back(p, records_[p]);
  }
  // irisd matches plans across ranks in the order each rank registered them.
  std::sort(plans.begin(), plans.end(),
            [](const auto& a, const auto& b) { return a.second.order < b.second.order; });
  bool lost = false;
  for (auto& [slot, plan] : plans) {
    const auto id = comm_ids.find(plan.entry.comm_id);
    if (id == comm_ids.end())
      throw Error(ErrorCode::kNotFound,
                  "a CUDA graph holds a collective of a communicator that does not resume");
    plan.entry.comm_id = id->second;
    try {
      send(slot, plan.entry, plan.v_args, nullptr);
    } catch (const Error& e) {
      // This irisd went too: the next one is tried. Anything else is this plan's alone (memory
      // it names freed since the capture): it fails at check(), the rest resumes.
      if (e.code() == ErrorCode::kDaemonGone || e.code() == ErrorCode::kUnavailable) throw;
      client::debug_log("a CUDA graph's collective (plan slot " + std::to_string(slot) +
                        ") did not resume: " + e.what());
      std::lock_guard lock(mutex_);
      records_[slot].lost =
          Error(e.code(),
                "a collective captured into a CUDA graph could not be carried to the "
                "restarted irisd: " +
                    e.message() +
                    " (memory it names freed since the capture?): destroy the graph and "
                    "capture it again (replaying it uses that memory)");
      lost = true;
    }
  }
  return lost;
}

void CapturedPlans::carry(const std::map<uint64_t, uint64_t>& comm_ids) {
  std::lock_guard lock(mutex_);
  for (Record& plan : records_)
    if (auto id = comm_ids.find(plan.entry.comm_id); plan.order != 0 && id != comm_ids.end())
      plan.entry.comm_id = id->second;
}

}  // namespace iris
