// GpuRuntime over the CUDA driver API (libcuda.so.1, loaded at run time).
#include "client/gpu/gpu_runtime.hpp"
#include "iris/error.hpp"

#ifdef IRIS_HAVE_CUDA
#include "iris/shared/cuda_library.hpp"
#endif

namespace iris {

#ifdef IRIS_HAVE_CUDA
namespace {
class CudaRuntime final : public GpuRuntime {
 public:
  CudaRuntime() : cu_(load()) {}
  ~CudaRuntime() override {
    if (flags_stream_ != nullptr) cu_.cuStreamDestroy(flags_stream_);
  }

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
  void use_context_of(const void* ptr) override {
    CUcontext current = nullptr;
    if (cu_.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current != nullptr) return;
    CUcontext owner = nullptr;
    check(cu_.cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT,
                                    reinterpret_cast<CUdeviceptr>(ptr)),
          "cannot register GPU buffer again: not device memory of this process");
    check(cu_.cuCtxSetCurrent(owner), "cuCtxSetCurrent");
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
  std::optional<GpuChunk> chunk_of(uintptr_t ptr) override {
    unsigned memory_type = 0;
    CUdeviceptr base = 0;
    size_t bytes = 0;
    unsigned long long block_id = 0;
    CUpointer_attribute attributes[] = {
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR,
        CU_POINTER_ATTRIBUTE_MAPPING_SIZE, CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID};
    void* values[] = {&memory_type, &base, &bytes, &block_id};
    // Memory the driver does not know answers success with a zero memory type.
    if (cu_.cuPointerGetAttributes(4, attributes, values, ptr) != CUDA_SUCCESS ||
        memory_type != CU_MEMORYTYPE_DEVICE || bytes == 0)
      return std::nullopt;
    return GpuChunk{base, bytes, block_id};
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
    CUresult r = cu_.cuMemsetD32(flags, 0, bytes / sizeof(uint32_t));
    // store_flag's context and stream: it runs on libiris's own thread too (no context
    // current there), and must not queue behind the streams it releases.
    if (r == CUDA_SUCCESS) r = cu_.cuCtxGetCurrent(&flags_context_);
    if (r == CUDA_SUCCESS) r = cu_.cuStreamCreate(&flags_stream_, CU_STREAM_NON_BLOCKING);
    if (r != CUDA_SUCCESS) cu_.cuMemFree(flags);
    check(r, "setting up stream done flags (cuMemsetD32, cuStreamCreate)");
    return flags;
  }
  void free_flags(uint64_t address) override { cu_.cuMemFree(address); }
  void store_flag(uint64_t address, uint32_t value) override {
    CUcontext current = nullptr;
    if (cu_.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == nullptr)
      cu_.cuCtxSetCurrent(flags_context_);
    cu_.cuStreamWriteValue32(flags_stream_, address, value, CU_STREAM_WRITE_VALUE_DEFAULT);
  }
  uint32_t load_flag(uint64_t address) override {
    CUcontext current = nullptr;
    if (cu_.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == nullptr)
      cu_.cuCtxSetCurrent(flags_context_);
    uint32_t value = 0;
    check(cu_.cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(&value), address, sizeof(value),
                            flags_stream_),
          "reading a stream done flag (cuMemcpyAsync)");
    check(cu_.cuStreamSynchronize(flags_stream_),
          "reading a stream done flag (cuStreamSynchronize)");
    return value;
  }
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

  bool capturing(void* stream) override {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    check(cu_.cuStreamIsCapturing(static_cast<CUstream>(stream), &status), "cuStreamIsCapturing");
    return status != CU_STREAM_CAPTURE_STATUS_NONE;
  }
  void check_capture_supported() override {
    if (cu_.cuStreamGetCaptureInfo == nullptr)
      throw Error(ErrorCode::kUnavailable,
                  "collectives in CUDA graphs need a driver with cuStreamGetCaptureInfo_v3 "
                  "(CUDA 12.3 or newer)");
  }
  void on_graph_destroyed(void* stream, std::function<void()> destroyed) override {
    check_capture_supported();
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    CUgraph graph = nullptr;
    check(cu_.cuStreamGetCaptureInfo(static_cast<CUstream>(stream), &status, nullptr, &graph,
                                     nullptr, nullptr, nullptr),
          "cuStreamGetCaptureInfo");
    if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE || graph == nullptr)
      throw Error(ErrorCode::kInvalidArgument,
                  "the stream's capture was invalidated (an earlier call broke it); end it and "
                  "capture again");
    auto* callback = new std::function<void()>(std::move(destroyed));
    CUuserObject object = nullptr;
    const CUresult created = cu_.cuUserObjectCreate(&object, callback, &run_and_delete, 1,
                                                    CU_USER_OBJECT_NO_DESTRUCTOR_SYNC);
    if (created != CUDA_SUCCESS) delete callback;
    check(created, "cuUserObjectCreate (releasing the collective with its graph)");
    // The graph takes our reference: the object (and the callback) go with the graph.
    check(cu_.cuGraphRetainUserObject(graph, object, 1, CU_GRAPH_USER_OBJECT_MOVE),
          "cuGraphRetainUserObject");
  }
  void outside_capture_rules(const std::function<void()>& f) override {
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    check(cu_.cuThreadExchangeStreamCaptureMode(&mode), "cuThreadExchangeStreamCaptureMode");
    struct Restore {
      const cuda::Driver& cu;
      CUstreamCaptureMode mode;
      ~Restore() { cu.cuThreadExchangeStreamCaptureMode(&mode); }
    } restore{cu_, mode};
    f();
  }

 private:
  static const cuda::Driver& load() {
    std::string why;
    const cuda::Driver* cu = cuda::load_driver(why);
    if (cu == nullptr) throw Error(ErrorCode::kUnavailable, "CUDA GPU memory or streams: " + why);
    return *cu;
  }
  static void CUDA_CB run_and_delete(void* p) {
    auto* callback = static_cast<std::function<void()>*>(p);
    (*callback)();
    delete callback;
  }
  void check(CUresult r, const std::string& what) const {
    if (r != CUDA_SUCCESS) throw Error(ErrorCode::kInvalidArgument, what + ": " + cu_.describe(r));
  }

  const cuda::Driver& cu_;
  CUcontext flags_context_ = nullptr;
  CUstream flags_stream_ = nullptr;
};
}  // namespace

std::unique_ptr<GpuRuntime> make_cuda_runtime() { return std::make_unique<CudaRuntime>(); }
#else
std::unique_ptr<GpuRuntime> make_cuda_runtime() {
  throw Error(ErrorCode::kUnavailable, "libiris was built without CUDA support");
}
#endif

}  // namespace iris
