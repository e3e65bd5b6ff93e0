#include "client/gpu/stream_flags.hpp"

#include "iris/error.hpp"

namespace iris {

StreamFlagsMapping::StreamFlagsMapping(void* segment_base, std::size_t segment_bytes,
                                       shm::StreamFlags* flags, uint32_t flag_count,
                                       RegisterDoneFlags register_done_flags,
                                       MakeRuntime make_runtime)
    : base_(segment_base),
      bytes_(segment_bytes),
      flags_(flags),
      flag_count_(flag_count),
      register_done_flags_(std::move(register_done_flags)),
      make_runtime_(std::move(make_runtime)) {}

StreamFlagsMapping::~StreamFlagsMapping() {
  if (!runtime_) return;
  if (device_base_ != 0) runtime_->unmap_host(base_);
  if (done_flags_ != 0) runtime_->free_flags(done_flags_);
}

GpuRuntime& StreamFlagsMapping::ready_runtime(GpuStream stream) {
  const GpuVendor vendor = stream.vendor;
  std::lock_guard lock(mutex_);
  if (runtime_) {
    if (vendor != runtime_->vendor())
      throw Error(ErrorCode::kInvalidArgument,
                  "this client already orders requests on another GPU vendor's streams; use one "
                  "client per runtime (CUDA or HIP)");
    return *runtime_;
  }
  auto runtime = make_runtime_(vendor);
  const std::size_t flag_bytes = std::size_t{flag_count_} * sizeof(uint32_t);
  uint64_t device_base = 0;
  uint64_t done_flags = 0;
  // Pinning and allocating are what stream capture forbids: a first stream-ordered call made
  // while capturing still sets up.
  runtime->outside_capture_rules([&] {
    device_base = runtime->map_host(base_, bytes_);
    try {
      done_flags = runtime->allocate_flags(flag_bytes);
      // Allocated here: always an allocation with a legacy IPC handle.
      const ExportedGpuBuffer exported =
          export_gpu_buffer(*runtime, reinterpret_cast<void*>(done_flags), flag_bytes);
      v1::RegisterIpcBuffer request = register_request(vendor, *exported.ipc);
      request.set_stream_done_flags(true);
      register_done_flags_(request);
    } catch (...) {
      if (done_flags != 0) runtime->free_flags(done_flags);
      runtime->unmap_host(base_);
      throw;
    }
  });
  device_base_ = device_base;
  done_flags_ = done_flags;
  runtime_ = std::move(runtime);
  return *runtime_;
}

void StreamFlagsMapping::release(uint32_t slot, uint32_t generation) {
  std::lock_guard lock(mutex_);
  if (runtime_ && done_flags_ != 0)
    runtime_->store_flag(done_flags_ + std::size_t{slot} * sizeof(uint32_t), generation);
}

bool StreamFlagsMapping::done_reached(uint32_t slot, uint32_t generation) {
  std::lock_guard lock(mutex_);
  return runtime_ && done_flags_ != 0 &&
         runtime_->load_flag(done_flags_ + std::size_t{slot} * sizeof(uint32_t)) >= generation;
}

uint64_t StreamFlagsMapping::ready_address(uint32_t index) const {
  const auto offset =
      reinterpret_cast<const char*>(&flags_[index].ready) - static_cast<const char*>(base_);
  return device_base_ + static_cast<uint64_t>(offset);
}

void StreamFlagsMapping::enqueue_ready(GpuStream stream, uint32_t slot, uint32_t generation) {
  GpuRuntime& runtime = ready_runtime(stream);
  runtime.write_value(stream.handle, ready_address(slot), generation);
}

void StreamFlagsMapping::enqueue_copy(GpuStream stream, void* dst, const void* src,
                                      std::size_t bytes) {
  ready_runtime(stream).copy_async(stream.handle, dst, src, bytes);
}

void StreamFlagsMapping::enqueue_wait_done(GpuStream stream, uint32_t slot, uint32_t generation) {
  GpuRuntime& runtime = ready_runtime(stream);
  runtime.wait_value_geq(stream.handle, done_flags_ + std::size_t{slot} * sizeof(uint32_t),
                         generation);
}

bool StreamFlagsMapping::capturing(GpuStream stream) {
  return ready_runtime(stream).capturing(stream.handle);
}

void StreamFlagsMapping::check_capture_supported(GpuStream stream) {
  ready_runtime(stream).check_capture_supported();
}

void StreamFlagsMapping::enqueue_graph_ready(GpuStream stream, uint32_t index) {
  ready_runtime(stream).write_value(stream.handle, ready_address(index), 1);
}

void StreamFlagsMapping::enqueue_graph_wait(GpuStream stream, uint32_t index) {
  GpuRuntime& runtime = ready_runtime(stream);
  const uint64_t done = done_flags_ + std::size_t{index} * sizeof(uint32_t);
  runtime.wait_value_geq(stream.handle, done, 1);
  runtime.write_value(stream.handle, done, 0);
}

void StreamFlagsMapping::on_graph_destroyed(GpuStream stream, std::function<void()> destroyed) {
  ready_runtime(stream).on_graph_destroyed(stream.handle, std::move(destroyed));
}

}  // namespace iris
