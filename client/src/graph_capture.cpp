// Client::Impl's CUDA-graph capture: a stream-ordered collective on a capturing stream is
// registered with irisd once as a graph plan, and only the plan slot's stream memory operations
// go into the graph; the plan is released when the graph is destroyed.
#include "client/src/client_impl.hpp"

#include "client/src/failure_text.hpp"
#include "client/src/group_waits.hpp"

namespace iris {

void Client::Impl::capture_graph_plan(shm::SubmitEntry entry, CommRank& comm, GpuStream stream,
                                      std::optional<StreamCopy> own_block,
                                      std::span<const uint64_t> v_args) {
  stream_flags->check_capture_supported(stream);  // before irisd holds anything
  uint32_t plan_slot = 0;
  {
    std::lock_guard lock(plans_mutex_);
    while (plan_slot < plan_slot_used_.size() && plan_slot_used_[plan_slot]) ++plan_slot;
    if (plan_slot == plan_slot_used_.size())
      throw Error(ErrorCode::kLimitExceeded,
                  "this client already holds " + std::to_string(shm::kGraphPlanSlots) +
                      " collectives captured in CUDA graphs; destroy some graphs first");
    plan_slot_used_[plan_slot] = true;
  }
  auto free_plan_slot = [&] {
    std::lock_guard lock(plans_mutex_);
    plan_slot_used_[plan_slot] = false;
  };
  try {
    entry.slot = 0;
    entry.generation = 0;
    entry.seq = 0;
    // An irisd gone since the answer (perhaps after the resume read the plans) gets it again.
    link->call_and_record(
        plans_mutex_, [&] { return send_plan(plan_slot, entry, v_args, &comm); },
        [&](uint64_t) {
          plan_records_[plan_slot] = {
              entry, next_plan_order_++, {v_args.begin(), v_args.end()}, {}};
        });
  } catch (const Error&) {
    free_plan_slot();
    throw;
  }
  // From here irisd holds the plan: whatever fails, the graph's release (or this) frees it.
  try {
    if (own_block)
      stream_flags->enqueue_copy(stream, own_block->dst, own_block->src, own_block->bytes);
    const uint32_t index = view.ring_depth + plan_slot;
    stream_flags->enqueue_graph_ready(stream, index);
    // In a group the waits follow every ready flag of the group, as outside graphs: a send and
    // a receive captured on one stream must not wait for each other.
    if (in_group()) {
      defer_to_group([self = shared_from_this(), stream, index] {
        self->stream_flags->enqueue_graph_wait(stream, index);
      });
    } else {
      stream_flags->enqueue_graph_wait(stream, index);
    }
    std::weak_ptr<Impl> self = weak_from_this();
    stream_flags->on_graph_destroyed(stream, [self, plan_slot] {
      if (auto impl = self.lock()) impl->release_graph_plan(plan_slot);
    });
  } catch (const Error&) {
    release_graph_plan(plan_slot);
    throw;
  }
}

uint64_t Client::Impl::send_plan(uint32_t plan_slot, shm::SubmitEntry& entry,
                                 std::span<const uint64_t> v_args, CommRank* comm) {
  const bool resuming = comm == nullptr;
  // All-to-all-v's counts: staged in a ring slot's area for irisd to read while it registers
  // the plan (it keeps a copy), then the slot is free again.
  std::optional<uint32_t> staging;
  if (!v_args.empty()) {
    staging = submissions->acquire_slot(deadline_after(options.submit_timeout), nullptr);
    try {
      submissions->stage_args(*staging, v_args, entry);
    } catch (const Error&) {
      submissions->release_slot(*staging);
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
      const uint64_t word =
          view.slots[view.ring_depth + plan_slot].word.load(std::memory_order_acquire);
      request.mutable_register_plan()->set_resumed(true);
      request.mutable_register_plan()->set_completed_replays((word & 1u) != 0 ? word >> 32 : 0);
      link->resume_call(request, "register a CUDA graph's collective again");
      connection = link->current_connection();
    } else {
      comms->call_naming(*comm, plan, "capture a collective into a CUDA graph", &connection);
    }
  } catch (const Error&) {
    if (staging) submissions->release_slot(*staging);
    throw;
  }
  if (staging) submissions->release_slot(*staging);
  return connection;
}

void Client::Impl::release_graph_plan(uint32_t plan_slot) {
  v1::SessionRequest request;
  request.mutable_release_plan()->set_plan_slot(plan_slot);
  try {
    if (!link->gone()) link->session_call(request, "release a CUDA graph's collective");
  } catch (const Error&) {
    // The session is ending or irisd is gone: the plan goes with the session.
  }
  // irisd no longer writes the slot: a failure of its last replay stays reported by
  // check_graphs although the graph is gone (it is often destroyed right after its stream's
  // synchronize, before the host looks).
  std::optional<Error> failed = plan_failure(plan_slot);
  std::lock_guard lock(plans_mutex_);
  if (failed && !released_failure_) released_failure_ = std::move(failed);
  plan_slot_used_[plan_slot] = false;
  plan_records_[plan_slot] = {};
}

std::optional<Error> Client::Impl::plan_failure(uint32_t plan_slot) const {
  {
    std::lock_guard lock(plans_mutex_);
    if (plan_records_[plan_slot].lost) return plan_records_[plan_slot].lost;
  }
  const uint32_t index = view.ring_depth + plan_slot;
  const uint64_t word = view.slots[index].word.load(std::memory_order_acquire);
  const ErrorCode code = shm::completion_code(word);
  if ((word & 1u) == 0 || code == ErrorCode::kOk) return std::nullopt;  // none yet, or it went well
  const std::string why = submissions->failure_text(index);
  return Error(code, "a collective captured into a CUDA graph failed in replay " +
                         std::to_string(static_cast<uint32_t>(word >> 32)) + ": " +
                         (why.empty() ? describe_failure(code) : why));
}

void Client::Impl::check_graphs() {
  check_daemon();
  std::vector<uint32_t> held;
  {
    std::lock_guard lock(plans_mutex_);
    if (released_failure_) {
      // Reported once: the graph that failed is gone.
      const Error failed = *released_failure_;
      released_failure_.reset();
      throw failed;
    }
    for (uint32_t p = 0; p < plan_slot_used_.size(); ++p)
      if (plan_slot_used_[p]) held.push_back(p);
  }
  for (uint32_t p : held)
    if (auto failed = plan_failure(p)) throw *failed;
}

}  // namespace iris
