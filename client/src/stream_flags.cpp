#include "client/src/stream_flags.hpp"

#include "iris/error.hpp"

namespace iris {

StreamFlagsMapping::StreamFlagsMapping(void* segment_base, std::size_t segment_bytes,
                                       shm::StreamFlags* flags, uint32_t depth,
                                       RegisterDoneFlags register_done_flags,
                                       MakeRuntime make_runtime)
    : base_(segment_base),
      bytes_(segment_bytes),
      flags_(flags),
      depth_(depth),
      register_done_flags_(std::move(register_done_flags)),
      make_runtime_(std::move(make_runtime)) {}

StreamFlagsMapping::~StreamFlagsMapping() {
  if (!runtime_) return;
  if (device_base_ != 0) runtime_->unmap_host(base_);
  if (done_flags_ != 0) runtime_->free_flags(done_flags_);
}

GpuRuntime& StreamFlagsMapping::ready_runtime(GpuVendor vendor) {
  std::lock_guard lock(mutex_);
  if (runtime_) {
    if (vendor != runtime_->vendor())
      throw Error(ErrorCode::kInvalidArgument,
                  "this client already orders requests on another GPU vendor's streams; use one "
                  "client per runtime (CUDA or HIP)");
    return *runtime_;
  }
  auto runtime = make_runtime_(vendor);
  const std::size_t flag_bytes = std::size_t{depth_} * sizeof(uint32_t);
  const uint64_t device_base = runtime->map_host(base_, bytes_);
  uint64_t done_flags = 0;
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

void StreamFlagsMapping::enqueue_ready(GpuStream stream, uint32_t slot, uint32_t generation) {
  GpuRuntime& runtime = ready_runtime(stream.vendor);
  const auto offset =
      reinterpret_cast<const char*>(&flags_[slot].ready) - static_cast<const char*>(base_);
  runtime.write_value(stream.handle, device_base_ + static_cast<uint64_t>(offset), generation);
}

void StreamFlagsMapping::enqueue_copy(GpuStream stream, void* dst, const void* src,
                                      std::size_t bytes) {
  ready_runtime(stream.vendor).copy_async(stream.handle, dst, src, bytes);
}

void StreamFlagsMapping::enqueue_wait_done(GpuStream stream, uint32_t slot, uint32_t generation) {
  GpuRuntime& runtime = ready_runtime(stream.vendor);
  runtime.wait_value_geq(stream.handle, done_flags_ + std::size_t{slot} * sizeof(uint32_t),
                         generation);
}

}  // namespace iris
