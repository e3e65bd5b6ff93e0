#include "client/src/cuda_interop.hpp"

#include "client/src/gpu_stream_api.hpp"

#include "iris/error.hpp"

#ifdef IRIS_HAVE_CUDA
#include "iris/shared/cuda_driver.hpp"
#endif

namespace iris {

#ifdef IRIS_HAVE_CUDA
namespace {
const cuda::Driver& driver(const char* what) {
  std::string why;
  const cuda::Driver* cu = cuda::load_driver(why);
  if (cu == nullptr) throw Error(ErrorCode::kUnavailable, std::string(what) + ": " + why);
  return *cu;
}

void check(const cuda::Driver& cu, CUresult r, const std::string& what) {
  if (r != CUDA_SUCCESS) throw Error(ErrorCode::kInvalidArgument, what + ": " + cu.describe(r));
}
}  // namespace

ExportedCudaBuffer export_cuda_buffer(void* device_ptr, std::size_t bytes) {
  const cuda::Driver* cu = &driver("cannot register a GPU buffer");
  const auto ptr = reinterpret_cast<CUdeviceptr>(device_ptr);
  auto check = [&](CUresult r, const char* what) {
    iris::check(*cu, r, std::string("cannot register GPU buffer: ") + what);
  };
  int ordinal = -1;
  check(cu->cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr),
        "not device memory of this process");
  CUdevice device;
  char bus[64] = {};
  check(cu->cuDeviceGet(&device, ordinal), "cuDeviceGet");
  check(cu->cuDeviceGetPCIBusId(bus, sizeof(bus), device), "cuDeviceGetPCIBusId");
  if (bytes == 0) throw Error(ErrorCode::kOutOfRange, "cannot register an empty GPU buffer");
  CUdeviceptr base = 0;
  size_t size = 0;
  check(cu->cuMemGetAddressRange(&base, &size, ptr), "cuMemGetAddressRange");
  ExportedCudaBuffer out;
  CUipcMemHandle handle;
  if (cu->cuIpcGetMemHandle(&handle, base) == CUDA_SUCCESS) {
    // cudaMalloc memory: one allocation holds the whole range.
    const std::size_t offset = ptr - base;
    if (bytes > size - offset)
      throw Error(ErrorCode::kOutOfRange, "GPU buffer range of " + std::to_string(bytes) +
                                              " bytes at offset " + std::to_string(offset) +
                                              " does not fit its allocation of " +
                                              std::to_string(size) + " bytes");
    out.ipc.emplace();
    out.ipc->set_handle(std::string(reinterpret_cast<const char*>(&handle), sizeof(handle)));
    out.ipc->set_bus_id(bus);
    out.ipc->set_offset(offset);
    out.ipc->set_bytes(bytes);
    return out;
  }
  // Not legacy IPC-able: VMM memory. cuMemGetAddressRange names the one physical allocation
  // holding an address, so walk the range allocation by allocation and export each.
  out.vmm.set_bus_id(bus);
  out.vmm.set_offset(ptr - base);
  out.vmm.set_bytes(bytes);
  for (CUdeviceptr at = base; at < ptr + bytes;) {
    CUdeviceptr chunk = 0;
    size_t chunk_bytes = 0;
    check(cu->cuMemGetAddressRange(&chunk, &chunk_bytes, at),
          "the range runs past mapped GPU memory");
    CUmemGenericAllocationHandle handle;
    check(cu->cuMemRetainAllocationHandle(&handle, reinterpret_cast<void*>(chunk)),
          "cuMemRetainAllocationHandle");
    int fd = -1;
    const CUresult r =
        cu->cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    cu->cuMemRelease(handle);
    check(r,
          "cuMemExportToShareableHandle (allocate VMM memory with requestedHandleTypes including "
          "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)");
    out.fds.emplace_back(fd);
    out.vmm.add_chunk_bytes(chunk_bytes);
    at = chunk + chunk_bytes;
  }
  return out;
}

namespace {
class CudaStreamApi final : public GpuStreamApi {
 public:
  CudaStreamApi() : cu_(driver("stream-ordered all-gather")) {}

  uint64_t map_host(void* base, std::size_t bytes) override {
    check(cu_,
          cu_.cuMemHostRegister(base, bytes,
                                CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP),
          "pinning the session segment for the GPU (cuMemHostRegister)");
    CUdeviceptr device = 0;
    const CUresult r = cu_.cuMemHostGetDevicePointer(&device, base, 0);
    if (r != CUDA_SUCCESS) cu_.cuMemHostUnregister(base);
    check(cu_, r, "cuMemHostGetDevicePointer");
    return device;
  }
  void unmap_host(void* base) override { cu_.cuMemHostUnregister(base); }
  uint64_t allocate_flags(std::size_t bytes) override {
    CUdeviceptr flags = 0;
    check(cu_, cu_.cuMemAlloc(&flags, bytes), "allocating stream done flags (cuMemAlloc)");
    const CUresult r = cu_.cuMemsetD32(flags, 0, bytes / sizeof(uint32_t));
    if (r != CUDA_SUCCESS) cu_.cuMemFree(flags);
    check(cu_, r, "cuMemsetD32");
    return flags;
  }
  void free_flags(uint64_t address) override { cu_.cuMemFree(address); }
  void store_flag(uint64_t address, uint32_t value) override { cu_.cuMemsetD32(address, value, 1); }
  v1::RegisterBufferRequest export_flags(uint64_t address, std::size_t bytes) override {
    v1::RegisterBufferRequest request;
    // cuMemAlloc memory: always a legacy IPC handle.
    *request.mutable_cuda_ipc() = *export_cuda_buffer(reinterpret_cast<void*>(address), bytes).ipc;
    request.set_stream_done_flags(true);
    return request;
  }
  void write_value(void* stream, uint64_t address, uint32_t value) override {
    check(cu_,
          cu_.cuStreamWriteValue32(static_cast<CUstream>(stream), address, value,
                                   CU_STREAM_WRITE_VALUE_DEFAULT),
          "cuStreamWriteValue32 (input-ready flag)");
  }
  void wait_value_geq(void* stream, uint64_t address, uint32_t value) override {
    check(cu_,
          cu_.cuStreamWaitValue32(static_cast<CUstream>(stream), address, value,
                                  CU_STREAM_WAIT_VALUE_GEQ),
          "cuStreamWaitValue32 (done flag)");
  }

 private:
  const cuda::Driver& cu_;
};
}  // namespace

std::unique_ptr<GpuStreamApi> make_cuda_stream_api() { return std::make_unique<CudaStreamApi>(); }
#else
ExportedCudaBuffer export_cuda_buffer(void*, std::size_t) {
  throw Error(ErrorCode::kUnavailable, "libiris was built without CUDA support");
}

std::unique_ptr<GpuStreamApi> make_cuda_stream_api() {
  throw Error(ErrorCode::kUnavailable, "libiris was built without CUDA support");
}
#endif

}  // namespace iris
