// Stream ordering for one session, the same protocol on CUDA and HIP streams. Ready flags live in
// the session segment (host memory, pinned and mapped for the GPU on first use): the caller's
// stream writes them, irisd polls them. Done flags live in GPU memory allocated on first use and
// registered with irisd, which writes them after the copies (a stream memory operation on NVIDIA,
// a 4-byte SDMA copy on AMD), so the waiting stream polls its own GPU's memory. A session orders
// on one vendor's streams: the first stream-ordered call picks it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include "client/gpu/gpu_runtime.hpp"
#include "iris/shared/segment_layout.hpp"

namespace iris {

class StreamFlagsMapping {
 public:
  using RegisterDoneFlags = std::function<void(const v1::RegisterIpcBuffer&)>;
  using MakeRuntime = std::function<std::unique_ptr<GpuRuntime>(GpuVendor)>;
  // `make_runtime` loads the vendor's runtime on first use (tests pass a fake).
  // `flag_count`: the segment's ready flags (ring slots, then graph plan slots); as many done
  // flags are allocated. `register_done_flags` registers them with irisd and keeps what it sent,
  // to register the same GPU memory again if irisd restarts (the streams waiting on it go on).
  StreamFlagsMapping(void* segment_base, std::size_t segment_bytes, shm::StreamFlags* flags,
                     uint32_t flag_count, RegisterDoneFlags register_done_flags,
                     MakeRuntime make_runtime = make_gpu_runtime);
  ~StreamFlagsMapping();
  // Stores `generation` into a slot's done flag from the host (streams go on when irisd cannot
  // write it any more). Best effort; no-op before first use.
  void release(uint32_t slot, uint32_t generation);
  // Whether the slot's done flag reached `generation`: irisd wrote it (after the copies) even if
  // it died before the completion slot. False before first use. Throws iris::Error.
  bool done_reached(uint32_t slot, uint32_t generation);
  // Enqueues on `stream`: flags[slot].ready = generation. The first call maps the segment,
  // allocates the done flags and registers them with irisd (before irisd can see the request:
  // it may complete it at once). Throws iris::Error.
  void enqueue_ready(GpuStream stream, uint32_t slot, uint32_t generation);
  // Enqueues on `stream` a copy of this rank's own block (before its ready flag, so that irisd
  // need not run a same-GPU copy in its own context). Throws iris::Error.
  void enqueue_copy(GpuStream stream, void* dst, const void* src, std::size_t bytes);
  // Enqueues on `stream`: wait until the slot's done flag >= generation. Throws iris::Error.
  void enqueue_wait_done(GpuStream stream, uint32_t slot, uint32_t generation);

  // CUDA graphs (see daemon/collectives/graph_plans.hpp). Whether `stream` captures now; and
  // throws the reason where its runtime cannot capture collectives.
  bool capturing(GpuStream stream);
  void check_capture_supported(GpuStream stream);
  // The graph plan at flag `index` on a capturing stream: ready = 1 (enqueue_graph_ready), then
  // wait until done >= 1 and done = 0 (enqueue_graph_wait; a group holds it back to its end).
  // Constant values: right for any number of replays.
  void enqueue_graph_ready(GpuStream stream, uint32_t index);
  void enqueue_graph_wait(GpuStream stream, uint32_t index);
  // Calls `destroyed` when the graph `stream` captures into is destroyed.
  void on_graph_destroyed(GpuStream stream, std::function<void()> destroyed);

 private:
  // The session's GPU runtime, set up on first use (also while `stream` captures: the set-up
  // runs outside capture's rules). Throws iris::Error.
  GpuRuntime& ready_runtime(GpuStream stream);
  uint64_t ready_address(uint32_t index) const;

  void* base_;
  std::size_t bytes_;
  shm::StreamFlags* flags_;
  uint32_t flag_count_;
  RegisterDoneFlags register_done_flags_;
  MakeRuntime make_runtime_;
  std::mutex mutex_;  // guards the set-up below
  std::unique_ptr<GpuRuntime> runtime_;
  uint64_t device_base_ = 0;  // the segment as the GPU addresses it
  uint64_t done_flags_ = 0;   // GPU memory, flag_count_ x uint32
};

}  // namespace iris
