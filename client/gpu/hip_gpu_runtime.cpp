// GpuRuntime over the HIP runtime (libamdhip64, loaded at run time), for AMD GPUs.
#include "client/gpu/gpu_runtime.hpp"
#include "iris/error.hpp"

#ifdef IRIS_HAVE_HIP
#include "iris/shared/hip_library.hpp"
#endif

namespace iris {

#ifdef IRIS_HAVE_HIP
namespace {
class HipRuntime final : public GpuRuntime {
 public:
  explicit HipRuntime(const hip::Runtime& table) : hip_(table) {
    int version = 0;
    if (hip_.hipRuntimeGetVersion(&version) == hipSuccess) behaviour_ = hip::behaviour_of(version);
  }

  GpuVendor vendor() const override { return GpuVendor::kHip; }
  int version() const override { return behaviour_.version; }

  std::string bus_id_of(const void* ptr) override {
    int ordinal = -1;
    check(hip_.hipPointerGetAttribute(&ordinal, HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                      const_cast<void*>(ptr)),
          "cannot register GPU buffer: not device memory of this process");
    char bus[64] = {};
    check(hip_.hipDeviceGetPCIBusId(bus, sizeof(bus), ordinal), "hipDeviceGetPCIBusId");
    return bus;
  }
  void use_context_of(const void* ptr) override {
    // HIP has no "no device" state to test: only libiris's own threads call this.
    int ordinal = -1;
    check(hip_.hipPointerGetAttribute(&ordinal, HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                      const_cast<void*>(ptr)),
          "cannot register GPU buffer again: not device memory of this process");
    check(hip_.hipSetDevice(ordinal), "hipSetDevice");
  }
  std::pair<uintptr_t, std::size_t> allocation_of(uintptr_t ptr) override {
    hipDeviceptr_t base = nullptr;
    size_t size = 0;
    check(hip_.hipMemGetAddressRange(&base, &size, reinterpret_cast<hipDeviceptr_t>(ptr)),
          "cannot register GPU buffer: the range runs past mapped GPU memory "
          "(hipMemGetAddressRange)");
    return {reinterpret_cast<uintptr_t>(base), size};
  }
  std::optional<std::string> ipc_handle(uintptr_t allocation) override {
    hipIpcMemHandle_t handle;
    if (hip_.hipIpcGetMemHandle(&handle, reinterpret_cast<void*>(allocation)) != hipSuccess)
      return std::nullopt;
    return std::string(handle.reserved, sizeof(handle.reserved));
  }
  int export_fd(uintptr_t allocation) override {
    hipMemGenericAllocationHandle_t handle{};
    check(hip_.hipMemRetainAllocationHandle(&handle, reinterpret_cast<void*>(allocation)),
          "cannot register GPU buffer: hipMemRetainAllocationHandle");
    // Room for a pointer-sized value: HIP's examples pass a void* here.
    uint64_t shareable = 0;
    const hipError_t r = hip_.hipMemExportToShareableHandle(&shareable, handle,
                                                            hipMemHandleTypePosixFileDescriptor, 0);
    // From 6.0 the retain takes no reference but the release still drops one: releasing would
    // free memory the owner (PyTorch's allocator) still maps.
    if (behaviour_.retain_takes_reference) static_cast<void>(hip_.hipMemRelease(handle));
    check(r,
          "cannot register GPU buffer: hipMemExportToShareableHandle (allocate VMM memory with "
          "requestedHandleType hipMemHandleTypePosixFileDescriptor)");
    return static_cast<int>(shareable);
  }
  // HIP names no physical allocation per address that this code relies on across ROCm 5 and 6:
  // under the hsa engine GPU memory is registered explicitly (Client::register_hip_buffer).
  std::optional<GpuChunk> chunk_of(uintptr_t) override { return std::nullopt; }

  uint64_t map_host(void* base, std::size_t bytes) override {
    check(hip_.hipHostRegister(base, bytes, hipHostRegisterMapped | hipHostRegisterPortable),
          "pinning the session segment for the GPU (hipHostRegister)");
    void* device = nullptr;
    const hipError_t r = hip_.hipHostGetDevicePointer(&device, base, 0);
    if (r != hipSuccess) static_cast<void>(hip_.hipHostUnregister(base));
    check(r, "hipHostGetDevicePointer");
    return reinterpret_cast<uint64_t>(device);
  }
  void unmap_host(void* base) override { static_cast<void>(hip_.hipHostUnregister(base)); }
  uint64_t allocate_flags(std::size_t bytes) override {
    void* flags = nullptr;
    check(hip_.hipMalloc(&flags, bytes), "allocating stream done flags (hipMalloc)");
    const hipError_t r = hip_.hipMemsetD32(flags, 0, bytes / sizeof(uint32_t));
    if (r != hipSuccess) static_cast<void>(hip_.hipFree(flags));
    check(r, "hipMemsetD32");
    return reinterpret_cast<uint64_t>(flags);
  }
  void free_flags(uint64_t address) override {
    static_cast<void>(hip_.hipFree(reinterpret_cast<void*>(address)));
  }
  void store_flag(uint64_t address, uint32_t value) override {
    static_cast<void>(
        hip_.hipMemsetD32(reinterpret_cast<void*>(address), static_cast<int>(value), 1));
  }
  uint32_t load_flag(uint64_t address) override {
    // A stream of its own that does not wait for the caller's streams (they wait on this flag).
    if (flags_stream_ == nullptr)
      check(hip_.hipStreamCreateWithFlags(&flags_stream_, hipStreamNonBlocking),
            "hipStreamCreateWithFlags (reading a done flag)");
    uint32_t value = 0;
    check(hip_.hipMemcpyAsync(&value, reinterpret_cast<void*>(address), sizeof(value),
                              hipMemcpyDeviceToHost, flags_stream_),
          "reading a stream done flag (hipMemcpyAsync)");
    check(hip_.hipStreamSynchronize(flags_stream_),
          "reading a stream done flag (hipStreamSynchronize)");
    return value;
  }
  void copy_async(void* stream, void* dst, const void* src, std::size_t bytes) override {
    check(hip_.hipMemcpyAsync(dst, src, bytes, hipMemcpyDefault, static_cast<hipStream_t>(stream)),
          "hipMemcpyAsync (own block)");
  }
  void write_value(void* stream, uint64_t address, uint32_t value) override {
    check(hip_.hipStreamWriteValue32(static_cast<hipStream_t>(stream),
                                     reinterpret_cast<void*>(address), value, 0),
          "hipStreamWriteValue32 (input-ready flag)");
  }
  void wait_value_geq(void* stream, uint64_t address, uint32_t value) override {
    // HIP compares unsigned (no wrap): generations stay far below 2^32 per slot in practice.
    const hipError_t r = hip_.hipStreamWaitValue32(static_cast<hipStream_t>(stream),
                                                   reinterpret_cast<void*>(address), value,
                                                   hipStreamWaitValueGte, 0xffffffffu);
    if (r == hipErrorInvalidValue && hip::streamops_cp_wait_requested())
      throw Error(ErrorCode::kUnavailable,
                  "hipStreamWaitValue32 (done flag) refused with GPU_STREAMOPS_CP_WAIT set: this "
                  "ROCm release's command-processor wait accepts only signal memory "
                  "(hipMallocSignalMemory), which irisd cannot write. Unset GPU_STREAMOPS_CP_WAIT "
                  "for this process (the wait then runs as a one-thread kernel), or make "
                  "host-blocking calls");
    check(r, "hipStreamWaitValue32 (done flag)");
  }

  bool capturing(void* stream) override {
    if (hip_.hipStreamIsCapturing == nullptr) return false;
    hipStreamCaptureStatus status = hipStreamCaptureStatusNone;
    check(hip_.hipStreamIsCapturing(static_cast<hipStream_t>(stream), &status),
          "hipStreamIsCapturing");
    return status != hipStreamCaptureStatusNone;
  }
  // Not run on ROCm hardware here: refused with the reason rather than captured untested.
  void check_capture_supported() override {
    throw Error(ErrorCode::kUnavailable,
                "collectives cannot be captured into HIP graphs yet (the stream memory operations "
                "they need are untested under hipStreamBeginCapture); call it outside the "
                "capture, or use the CUDA path");
  }
  void on_graph_destroyed(void*, std::function<void()>) override { check_capture_supported(); }
  void outside_capture_rules(const std::function<void()>& f) override { f(); }

 public:
  static const hip::Runtime& load() {
    std::string why;
    const hip::Runtime* hip = hip::load_runtime(why);
    if (hip == nullptr) throw Error(ErrorCode::kUnavailable, "HIP GPU memory or streams: " + why);
    return *hip;
  }

 private:
  void check(hipError_t r, const std::string& what) const {
    if (r != hipSuccess) throw Error(ErrorCode::kInvalidArgument, what + ": " + hip_.describe(r));
  }

  const hip::Runtime& hip_;
  hip::Behaviour behaviour_;
  hipStream_t flags_stream_ = nullptr;  // load_flag's, made on first use (the process keeps it)
};
}  // namespace

std::unique_ptr<GpuRuntime> make_hip_runtime() {
  return std::make_unique<HipRuntime>(HipRuntime::load());
}
std::unique_ptr<GpuRuntime> make_hip_runtime(const hip::Runtime& table) {
  return std::make_unique<HipRuntime>(table);
}
#else
std::unique_ptr<GpuRuntime> make_hip_runtime() {
  throw Error(ErrorCode::kUnavailable, "libiris was built without HIP support");
}
#endif

}  // namespace iris
