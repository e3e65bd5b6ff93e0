// Client::Impl's CUDA-graph capture: a stream-ordered collective on a capturing stream is
// registered with irisd once as a graph plan (CapturedPlans), and only the plan slot's stream
// memory operations go into the graph; the plan is released when the graph is destroyed.
#include "client/src/client_impl.hpp"

#include "client/src/group_waits.hpp"

namespace iris {

void Client::Impl::capture_graph_plan(shm::SubmitEntry entry, CommRank& comm, GpuStream stream,
                                      std::optional<StreamCopy> own_block,
                                      std::span<const uint64_t> v_args) {
  stream_flags->check_capture_supported(stream);  // before irisd holds anything
  const uint32_t plan_slot = plans->take_slot();
  plans->add(plan_slot, entry, comm, v_args);
  // From here irisd holds the plan: whatever fails, the graph's release (or this) frees it.
  try {
    if (own_block)
      stream_flags->enqueue_copy(stream, own_block->dst, own_block->src, own_block->bytes);
    const uint32_t index = plans->flag_index(plan_slot);
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
    // Runs on a GPU runtime thread when the graph is destroyed.
    std::weak_ptr<Impl> self = weak_from_this();
    stream_flags->on_graph_destroyed(stream, [self, plan_slot] {
      if (auto impl = self.lock()) impl->plans->release(plan_slot);
    });
  } catch (const Error&) {
    plans->release(plan_slot);
    throw;
  }
}

void Client::Impl::check_graphs() {
  check_daemon();
  plans->check();
}

}  // namespace iris
