#include "client/gpu/gpu_runtime.hpp"

#include "iris/error.hpp"

namespace iris {

std::unique_ptr<GpuRuntime> make_cuda_runtime();
std::unique_ptr<GpuRuntime> make_hip_runtime();

std::unique_ptr<GpuRuntime> make_gpu_runtime(GpuVendor vendor) {
  return vendor == GpuVendor::kCuda ? make_cuda_runtime() : make_hip_runtime();
}

v1::RegisterIpcBuffer register_request(GpuVendor vendor, const v1::CudaIpcBuffer& ipc) {
  v1::RegisterIpcBuffer request;
  *request.mutable_buffer() = ipc;
  request.set_hip(vendor == GpuVendor::kHip);
  return request;
}

ExportedGpuBuffer export_gpu_buffer(GpuRuntime& runtime, void* device_ptr, std::size_t bytes) {
  const std::string bus = runtime.bus_id_of(device_ptr);
  if (bytes == 0) throw Error(ErrorCode::kOutOfRange, "cannot register an empty GPU buffer");
  const auto ptr = reinterpret_cast<uintptr_t>(device_ptr);
  const auto [base, size] = runtime.allocation_of(ptr);
  ExportedGpuBuffer out;
  if (auto handle = runtime.ipc_handle(base)) {
    // One allocation holds the whole range.
    const std::size_t offset = ptr - base;
    if (bytes > size - offset)
      throw Error(ErrorCode::kOutOfRange, "GPU buffer range of " + std::to_string(bytes) +
                                              " bytes at offset " + std::to_string(offset) +
                                              " does not fit its allocation of " +
                                              std::to_string(size) + " bytes");
    out.ipc.emplace();
    out.ipc->set_handle(*handle);
    out.ipc->set_bus_id(bus);
    out.ipc->set_offset(offset);
    out.ipc->set_bytes(bytes);
    out.ipc->set_runtime_version(static_cast<uint32_t>(runtime.version()));
    return out;
  }
  // VMM memory: the address range query names the one physical allocation holding an address,
  // so walk the range allocation by allocation and export each.
  out.vmm.set_bus_id(bus);
  out.vmm.set_offset(ptr - base);
  out.vmm.set_bytes(bytes);
  out.vmm.set_hip(runtime.vendor() == GpuVendor::kHip);
  out.vmm.set_runtime_version(static_cast<uint32_t>(runtime.version()));
  for (uintptr_t at = base; at < ptr + bytes;) {
    const auto [chunk, chunk_bytes] = runtime.allocation_of(at);
    if (chunk_bytes == 0 || chunk + chunk_bytes <= at)
      throw Error(ErrorCode::kInvalidArgument,
                  "cannot register GPU buffer: the runtime reports an empty allocation inside it");
    out.fds.emplace_back(runtime.export_fd(chunk));
    out.vmm.add_chunk_bytes(chunk_bytes);
    at = chunk + chunk_bytes;
  }
  return out;
}

}  // namespace iris
