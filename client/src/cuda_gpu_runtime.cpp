// GpuRuntime over the CUDA driver API (libcuda.so.1, loaded at run time).
#include "client/src/gpu_runtime.hpp"
#include "iris/error.hpp"

#ifdef IRIS_HAVE_CUDA
#include "iris/shared/cuda_driver.hpp"
#endif

namespace iris {

#ifdef IRIS_HAVE_CUDA
namespace {
class CudaRuntime final : public GpuRuntime {
 public:
  CudaRuntime() : cu_(load()) {}

  GpuVendor vendor() const override { return GpuVendor::kCuda; }
  int version() const override {
    int v = 0;
    return cu_.cuDriverGetVersion(&v) == CUDA_SUCCESS ? v : 0;
  }

  std::string bus_id_of(const void* ptr) override {
    int ordinal = -1;
    check(cu_.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                    reinterpret_cast<CUdeviceptr>(ptr)),
          "cannot register GPU buffer: not device memory of this process");
    CUdevice device;
    char bus[64] = {};
    check(cu_.cuDeviceGet(&device, ordinal), "cuDeviceGet");
    check(cu_.cuDeviceGetPCIBusId(bus, sizeof(bus), device), "cuDeviceGetPCIBusId");
    return bus;
  }
  std::pair<uintptr_t, std::size_t> allocation_of(uintptr_t ptr) override {
    CUdeviceptr base = 0;
    size_t size = 0;
    check(cu_.cuMemGetAddressRange(&base, &size, ptr),
          "cannot register GPU buffer: the range runs past mapped GPU memory "
          "(cuMemGetAddressRange)");
    return {base, size};
  }
  std::optional<std::string> ipc_handle(uintptr_t allocation) override {
    CUipcMemHandle handle;
    if (cu_.cuIpcGetMemHandle(&handle, allocation) != CUDA_SUCCESS) return std::nullopt;
    return std::string(reinterpret_cast<const char*>(&handle), sizeof(handle));
  }
  int export_fd(uintptr_t allocation) override {
    CUmemGenericAllocationHandle handle;
    check(cu_.cuMemRetainAllocationHandle(&handle, reinterpret_cast<void*>(allocation)),
          "cannot register GPU buffer: cuMemRetainAllocationHandle");
    int fd = -1;
    const CUresult r =
        cu_.cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    cu_.cuMemRelease(handle);
    check(r,
          "cannot register GPU buffer: cuMemExportToShareableHandle (allocate VMM memory with "
          "requestedHandleTypes including CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)");
    return fd;
  }

  uint64_t map_host(void* base, std::size_t bytes) override {
    check(cu_.cuMemHostRegister(base, bytes,
                                CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP),
          "pinning the session segment for the GPU (cuMemHostRegister)");
    CUdeviceptr device = 0;
    const CUresult r = cu_.cuMemHostGetDevicePointer(&device, base, 0);
    if (r != CUDA_SUCCESS) cu_.cuMemHostUnregister(base);
    check(r, "cuMemHostGetDevicePointer");
    return device;
  }
  void unmap_host(void* base) override { cu_.cuMemHostUnregister(base); }
  uint64_t allocate_flags(std::size_t bytes) override {
    CUdeviceptr flags = 0;
    check(cu_.cuMemAlloc(&flags, bytes), "allocating stream done flags (cuMemAlloc)");
    const CUresult r = cu_.cuMemsetD32(flags, 0, bytes / sizeof(uint32_t));
    if (r != CUDA_SUCCESS) cu_.cuMemFree(flags);
    check(r, "cuMemsetD32");
    return flags;
  }
  void free_flags(uint64_t address) override { cu_.cuMemFree(address); }
  void store_flag(uint64_t address, uint32_t value) override { cu_.cuMemsetD32(address, value, 1); }
  void copy_async(void* stream, void* dst, const void* src, std::size_t bytes) override {
    check(cu_.cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src),
                            bytes, static_cast<CUstream>(stream)),
          "cuMemcpyAsync (own block)");
  }
  void write_value(void* stream, uint64_t address, uint32_t value) override {
    check(cu_.cuStreamWriteValue32(static_cast<CUstream>(stream), address, value,
                                   CU_STREAM_WRITE_VALUE_DEFAULT),
          "cuStreamWriteValue32 (input-ready flag)");
  }
  void wait_value_geq(void* stream, uint64_t address, uint32_t value) override {
    check(cu_.cuStreamWaitValue32(static_cast<CUstream>(stream), address, value,
                                  CU_STREAM_WAIT_VALUE_GEQ),
          "cuStreamWaitValue32 (done flag)");
  }

 private:
  static const cuda::Driver& load() {
    std::string why;
    const cuda::Driver* cu = cuda::load_driver(why);
    if (cu == nullptr) throw Error(ErrorCode::kUnavailable, "CUDA GPU memory or streams: " + why);
    return *cu;
  }
  void check(CUresult r, const std::string& what) const {
    if (r != CUDA_SUCCESS) throw Error(ErrorCode::kInvalidArgument, what + ": " + cu_.describe(r));
  }

  const cuda::Driver& cu_;
};
}  // namespace

std::unique_ptr<GpuRuntime> make_cuda_runtime() { return std::make_unique<CudaRuntime>(); }
#else
std::unique_ptr<GpuRuntime> make_cuda_runtime() {
  throw Error(ErrorCode::kUnavailable, "libiris was built without CUDA support");
}
#endif

}  // namespace iris
