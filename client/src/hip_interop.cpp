#include "client/src/hip_interop.hpp"

#include "client/src/gpu_stream_api.hpp"
#include "iris/error.hpp"

#ifdef IRIS_HAVE_HIP
#include "iris/shared/hip_runtime.hpp"
#endif

namespace iris {

#ifdef IRIS_HAVE_HIP
namespace {
const hip::Runtime& runtime(const char* what) {
  std::string why;
  const hip::Runtime* hip = hip::load_runtime(why);
  if (hip == nullptr) throw Error(ErrorCode::kUnavailable, std::string(what) + ": " + why);
  return *hip;
}

void check(const hip::Runtime& hip, hipError_t r, const std::string& what) {
  if (r != hipSuccess) throw Error(ErrorCode::kInvalidArgument, what + ": " + hip.describe(r));
}
}  // namespace

v1::CudaIpcBuffer export_hip_buffer(void* device_ptr, std::size_t bytes) {
  const hip::Runtime& hip = runtime("cannot register a GPU buffer");
  if (bytes == 0) throw Error(ErrorCode::kOutOfRange, "cannot register an empty GPU buffer");
  int ordinal = -1;
  check(hip, hip.hipPointerGetAttribute(&ordinal, HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL, device_ptr),
        "cannot register GPU buffer: not device memory of this process");
  char bus[64] = {};
  check(hip, hip.hipDeviceGetPCIBusId(bus, sizeof(bus), ordinal), "hipDeviceGetPCIBusId");
  hipDeviceptr_t base = nullptr;
  size_t size = 0;
  check(hip, hip.hipMemGetAddressRange(&base, &size, device_ptr), "hipMemGetAddressRange");
  const std::size_t offset = static_cast<char*>(device_ptr) - static_cast<char*>(base);
  if (bytes > size - offset)
    throw Error(ErrorCode::kOutOfRange, "GPU buffer range of " + std::to_string(bytes) +
                                            " bytes at offset " + std::to_string(offset) +
                                            " does not fit its allocation of " +
                                            std::to_string(size) + " bytes");
  hipIpcMemHandle_t handle;
  check(hip, hip.hipIpcGetMemHandle(&handle, base),
        "cannot register GPU buffer (hipIpcGetMemHandle: allocate it with hipMalloc)");
  v1::CudaIpcBuffer out;
  out.set_handle(std::string(handle.reserved, sizeof(handle.reserved)));
  out.set_bus_id(bus);
  out.set_offset(offset);
  out.set_bytes(bytes);
  return out;
}

namespace {
class HipStreamApi final : public GpuStreamApi {
 public:
  HipStreamApi() : hip_(runtime("stream-ordered all-gather")) {}

  uint64_t map_host(void* base, std::size_t bytes) override {
    check(hip_, hip_.hipHostRegister(base, bytes, hipHostRegisterMapped | hipHostRegisterPortable),
          "pinning the session segment for the GPU (hipHostRegister)");
    void* device = nullptr;
    const hipError_t r = hip_.hipHostGetDevicePointer(&device, base, 0);
    if (r != hipSuccess) static_cast<void>(hip_.hipHostUnregister(base));
    check(hip_, r, "hipHostGetDevicePointer");
    return reinterpret_cast<uint64_t>(device);
  }
  void unmap_host(void* base) override { static_cast<void>(hip_.hipHostUnregister(base)); }
  uint64_t allocate_flags(std::size_t bytes) override {
    void* flags = nullptr;
    check(hip_, hip_.hipMalloc(&flags, bytes), "allocating stream done flags (hipMalloc)");
    const hipError_t r = hip_.hipMemsetD32(flags, 0, bytes / sizeof(uint32_t));
    if (r != hipSuccess) static_cast<void>(hip_.hipFree(flags));
    check(hip_, r, "hipMemsetD32");
    return reinterpret_cast<uint64_t>(flags);
  }
  void free_flags(uint64_t address) override {
    static_cast<void>(hip_.hipFree(reinterpret_cast<void*>(address)));
  }
  void store_flag(uint64_t address, uint32_t value) override {
    static_cast<void>(
        hip_.hipMemsetD32(reinterpret_cast<void*>(address), static_cast<int>(value), 1));
  }
  v1::RegisterBufferRequest export_flags(uint64_t address, std::size_t bytes) override {
    v1::RegisterBufferRequest request;
    *request.mutable_hip_ipc() = export_hip_buffer(reinterpret_cast<void*>(address), bytes);
    request.set_stream_done_flags(true);
    return request;
  }
  void write_value(void* stream, uint64_t address, uint32_t value) override {
    check(hip_,
          hip_.hipStreamWriteValue32(static_cast<hipStream_t>(stream),
                                     reinterpret_cast<void*>(address), value, 0),
          "hipStreamWriteValue32 (input-ready flag)");
  }
  void wait_value_geq(void* stream, uint64_t address, uint32_t value) override {
    // HIP compares unsigned (no wrap): generations stay far below 2^32 per slot in practice.
    check(hip_,
          hip_.hipStreamWaitValue32(static_cast<hipStream_t>(stream),
                                    reinterpret_cast<void*>(address), value, hipStreamWaitValueGte,
                                    0xffffffffu),
          "hipStreamWaitValue32 (done flag)");
  }

 private:
  const hip::Runtime& hip_;
};
}  // namespace

std::unique_ptr<GpuStreamApi> make_hip_stream_api() { return std::make_unique<HipStreamApi>(); }
#else
v1::CudaIpcBuffer export_hip_buffer(void*, std::size_t) {
  throw Error(ErrorCode::kUnavailable, "libiris was built without HIP support");
}

std::unique_ptr<GpuStreamApi> make_hip_stream_api() {
  throw Error(ErrorCode::kUnavailable, "libiris was built without HIP support");
}
#endif

}  // namespace iris
