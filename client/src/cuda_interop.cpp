#include "client/src/cuda_interop.hpp"

#include "iris/error.hpp"

#ifdef IRIS_HAVE_CUDA
#include "iris/shared/cuda_driver.hpp"
#endif

namespace iris {

StreamFlagsMapping::StreamFlagsMapping(void* segment_base, std::size_t segment_bytes,
                                       shm::StreamFlags* flags, uint32_t depth,
                                       RegisterDoneFlags register_done_flags)
    : base_(segment_base),
      bytes_(segment_bytes),
      flags_(flags),
      depth_(depth),
      register_done_flags_(std::move(register_done_flags)) {}

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

StreamFlagsMapping::~StreamFlagsMapping() {
  std::string why;
  const cuda::Driver* cu = cuda::load_driver(why);
  if (cu == nullptr) return;
  if (device_base_ != 0) cu->cuMemHostUnregister(base_);
  if (done_flags_ != 0) cu->cuMemFree(done_flags_);
}

uint64_t StreamFlagsMapping::done_flag_address(uint32_t slot) {
  std::call_once(done_flags_allocated_, [this] {
    const cuda::Driver& cu = driver("stream-ordered all-gather");
    CUdeviceptr flags = 0;
    check(cu, cu.cuMemAlloc(&flags, std::size_t{depth_} * sizeof(uint32_t)),
          "allocating stream done flags (cuMemAlloc)");
    check(cu, cu.cuMemsetD32(flags, 0, depth_), "cuMemsetD32");
    try {
      // cuMemAlloc memory: always a legacy IPC handle.
      register_done_flags_(*export_cuda_buffer(reinterpret_cast<void*>(flags),
                                               std::size_t{depth_} * sizeof(uint32_t))
                                .ipc);
    } catch (...) {
      cu.cuMemFree(flags);
      throw;
    }
    done_flags_ = flags;
  });
  return done_flags_ + std::size_t{slot} * sizeof(uint32_t);
}

void StreamFlagsMapping::release(uint32_t slot, uint32_t generation) {
  std::string why;
  const cuda::Driver* cu = cuda::load_driver(why);
  if (cu == nullptr || done_flags_ == 0) return;
  cu->cuMemsetD32(done_flags_ + std::size_t{slot} * sizeof(uint32_t), generation, 1);
}

uint64_t StreamFlagsMapping::device_address(const void* host_address) {
  std::call_once(registered_, [this] {
    const cuda::Driver& cu = driver("stream-ordered all-gather");
    check(cu,
          cu.cuMemHostRegister(base_, bytes_,
                               CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP),
          "pinning the session segment for the GPU (cuMemHostRegister)");
    CUdeviceptr device = 0;
    check(cu, cu.cuMemHostGetDevicePointer(&device, base_, 0), "cuMemHostGetDevicePointer");
    device_base_ = device;
  });
  return device_base_ + (static_cast<const char*>(host_address) - static_cast<char*>(base_));
}

void StreamFlagsMapping::enqueue_ready(CUstream_st* stream, uint32_t slot, uint32_t generation) {
  // The done flags must be registered before irisd sees the request: it may complete it at once.
  done_flag_address(slot);
  const cuda::Driver& cu = driver("stream-ordered all-gather");
  check(cu,
        cu.cuStreamWriteValue32(stream, device_address(&flags_[slot].ready), generation,
                                CU_STREAM_WRITE_VALUE_DEFAULT),
        "cuStreamWriteValue32 (input-ready flag)");
}

void StreamFlagsMapping::enqueue_wait_done(CUstream_st* stream, uint32_t slot,
                                           uint32_t generation) {
  const cuda::Driver& cu = driver("stream-ordered all-gather");
  check(
      cu,
      cu.cuStreamWaitValue32(stream, done_flag_address(slot), generation, CU_STREAM_WAIT_VALUE_GEQ),
      "cuStreamWaitValue32 (done flag)");
}
#else
namespace {
[[noreturn]] void no_cuda() {
  throw Error(ErrorCode::kUnavailable, "libiris was built without CUDA support");
}
}  // namespace

ExportedCudaBuffer export_cuda_buffer(void*, std::size_t) { no_cuda(); }

StreamFlagsMapping::~StreamFlagsMapping() = default;
void StreamFlagsMapping::release(uint32_t, uint32_t) {}
void StreamFlagsMapping::enqueue_ready(CUstream_st*, uint32_t, uint32_t) { no_cuda(); }
void StreamFlagsMapping::enqueue_wait_done(CUstream_st*, uint32_t, uint32_t) { no_cuda(); }
#endif

}  // namespace iris
