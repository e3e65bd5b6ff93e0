// The HIP half of the ROCm stand-in (see hsa_stand_in.hpp): the HIP calls irisd makes.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "tests/support/hsa_stand_in_state.hpp"

namespace iris::test {

namespace {
const char* h_error_string(hipError_t) { return "stand-in HIP error"; }
hipError_t h_runtime_version(int* v) {
  *v = stand_in->node.hip_version;
  return hipSuccess;
}
// CLR 6.x: a stream wait is a one-thread blit kernel unless GPU_STREAMOPS_CP_WAIT is true; then
// it is a command-processor barrier that accepts only signal memory (hipMallocSignalMemory) and
// refuses every other address with hipErrorInvalidValue. The stand-in allocates no signal memory.
hipError_t h_stream_wait(hipStream_t, void*, uint32_t, unsigned, uint32_t) {
  return hip::streamops_cp_wait_requested() ? hipErrorInvalidValue : hipSuccess;
}
hipError_t h_is_capturing(hipStream_t stream, hipStreamCaptureStatus* status) {
  *status = stream == HsaStandIn::capturing_stream() ? hipStreamCaptureStatusActive
                                                     : hipStreamCaptureStatusNone;
  return hipSuccess;
}
hipError_t h_device_count(int* count) {
  *count = stand_in->node.gpus;
  return hipSuccess;
}
hipError_t h_set_device(int device) {
  return device >= 0 && device < stand_in->node.gpus ? hipSuccess : hipErrorInvalidDevice;
}
hipError_t h_bus_id(char* bus, int length, int device) {
  std::snprintf(bus, static_cast<std::size_t>(length), "%s", bus_of(device).c_str());
  return hipSuccess;
}
hipError_t h_open(void** ptr, hipIpcMemHandle_t handle, unsigned int flags) {
  // CLR 6.x accepts only hipIpcMemLazyEnablePeerAccess, which is 0x1 there (0 in 5.x).
  if (flags != (stand_in->node.hip_version >= 60000000 ? 0x1u : 0u)) return hipErrorInvalidValue;
  uint64_t magic = 0;
  std::byte* base = nullptr;
  std::memcpy(&magic, handle.reserved, sizeof(magic));
  std::memcpy(&base, handle.reserved + sizeof(magic), sizeof(base));
  std::lock_guard lock(stand_in->mu);
  if (magic != kIpcMagic || !stand_in->allocations.contains(base)) return hipErrorInvalidValue;
  ++stand_in->ipc_opens;
  *ptr = base;
  return hipSuccess;
}
hipError_t h_close(void*) {
  std::lock_guard lock(stand_in->mu);
  ++stand_in->ipc_closes;
  return hipSuccess;
}
hipError_t h_address_range(hipDeviceptr_t* base, size_t* size, hipDeviceptr_t ptr) {
  std::lock_guard lock(stand_in->mu);
  const auto* p = static_cast<const std::byte*>(ptr);
  for (const auto& [b, a] : stand_in->allocations)
    if (p >= b && p < b + a.bytes) {
      *base = const_cast<std::byte*>(b);
      *size = a.bytes;
      return hipSuccess;
    }
  return hipErrorInvalidValue;
}
// HIP VMM: a reserved range is anonymous PROT_NONE memory; an imported allocation is the file
// descriptor (a memfd in tests), mapped MAP_SHARED into the range as the real runtime maps the
// physical allocation.
struct StandInAllocation {
  int fd;
};
hipError_t h_reserve(void** ptr, size_t size, size_t, void*, unsigned long long) {
  void* p = ::mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return hipErrorOutOfMemory;
  std::lock_guard lock(stand_in->mu);
  ++stand_in->vmm_reserved;
  *ptr = p;
  return hipSuccess;
}
hipError_t h_address_free(void* ptr, size_t size) {
  std::lock_guard lock(stand_in->mu);
  --stand_in->vmm_reserved;
  return ::munmap(ptr, size) == 0 ? hipSuccess : hipErrorInvalidValue;
}
hipError_t h_import(hipMemGenericAllocationHandle_t* handle, void* os_handle,
                    hipMemAllocationHandleType type) {
  if (type != hipMemHandleTypePosixFileDescriptor) return hipErrorInvalidValue;
  const int v = stand_in->node.hip_version;
  int given = 0;
  if (v >= 60000000 && v < 70100000) {
    // 6.0 to 7.0 read the fd through the pointer: a small integer there is no pointer, and the
    // real runtime would fault on it.
    if (reinterpret_cast<uintptr_t>(os_handle) < 4096) {
      std::lock_guard lock(stand_in->mu);
      ++stand_in->crashes;
      return hipErrorInvalidValue;
    }
    given = *static_cast<const int*>(os_handle);
  } else {
    given = static_cast<int>(reinterpret_cast<uintptr_t>(os_handle));
  }
  const int fd = ::dup(given);
  if (fd < 0) return hipErrorInvalidValue;
  *handle = reinterpret_cast<hipMemGenericAllocationHandle_t>(new StandInAllocation{fd});
  return hipSuccess;
}
hipError_t h_retain(hipMemGenericAllocationHandle_t* handle, void* ptr) {
  std::lock_guard lock(stand_in->mu);
  const auto* p = static_cast<const std::byte*>(ptr);
  for (auto& [base, owned] : stand_in->vmm_owned)
    if (p >= base && p < base + owned.bytes && owned.references > 0) {
      if (stand_in->node.hip_version < 60000000) ++owned.references;  // 6.x takes none
      *handle = reinterpret_cast<hipMemGenericAllocationHandle_t>(new StandInRetained{base});
      stand_in->retained.insert(*handle);
      return hipSuccess;
    }
  return hipErrorInvalidValue;
}
hipError_t h_export(void* shareable, hipMemGenericAllocationHandle_t handle,
                    hipMemAllocationHandleType type, unsigned long long) {
  if (type != hipMemHandleTypePosixFileDescriptor) return hipErrorInvalidValue;
  auto* r = reinterpret_cast<StandInRetained*>(handle);
  std::lock_guard lock(stand_in->mu);
  const int fd = ::dup(stand_in->vmm_owned.at(r->allocation).fd);
  *static_cast<uint64_t*>(shareable) = static_cast<uint64_t>(fd);
  return hipSuccess;
}
hipError_t h_release(hipMemGenericAllocationHandle_t handle) {
  std::lock_guard lock(stand_in->mu);
  if (stand_in->retained.erase(handle) == 1) {
    // A handle retained from the owner's mapping: the release drops a reference either way.
    auto* r = reinterpret_cast<StandInRetained*>(handle);
    --stand_in->vmm_owned.at(r->allocation).references;
    delete r;
    return hipSuccess;
  }
  auto* a = reinterpret_cast<StandInAllocation*>(handle);
  ::close(a->fd);
  delete a;
  return hipSuccess;
}
hipError_t h_map(void* ptr, size_t size, size_t offset, hipMemGenericAllocationHandle_t handle,
                 unsigned long long) {
  auto* a = reinterpret_cast<StandInAllocation*>(handle);
  if (::mmap(ptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, a->fd,
             static_cast<off_t>(offset)) == MAP_FAILED)
    return hipErrorInvalidValue;
  std::lock_guard lock(stand_in->mu);
  stand_in->vmm_mapped[static_cast<const std::byte*>(ptr)] = size;
  return hipSuccess;
}
hipError_t h_unmap(void* ptr, size_t size) {
  std::lock_guard lock(stand_in->mu);
  // ROCr unmaps one mapping per call: (ptr, size) must be exactly one of them.
  auto it = stand_in->vmm_mapped.find(static_cast<const std::byte*>(ptr));
  if (it == stand_in->vmm_mapped.end() || it->second != size) return hipErrorInvalidValue;
  stand_in->vmm_mapped.erase(it);
  return ::mmap(ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED
             ? hipErrorInvalidValue
             : hipSuccess;
}
hipError_t h_set_access(void*, size_t, const hipMemAccessDesc* desc, size_t count) {
  for (size_t i = 0; i < count; ++i)
    if (desc[i].location.type != hipMemLocationTypeDevice || desc[i].location.id < 0 ||
        desc[i].location.id >= stand_in->node.gpus)
      return hipErrorInvalidValue;
  return count == 0 ? hipErrorInvalidValue : hipSuccess;
}
}  // namespace

void install_hip_stand_in(hip::Runtime& hip) {
  hip.hipGetErrorString = h_error_string;
  hip.hipRuntimeGetVersion = h_runtime_version;
  hip.hipGetDeviceCount = h_device_count;
  hip.hipSetDevice = h_set_device;
  hip.hipDeviceGetPCIBusId = h_bus_id;
  hip.hipIpcOpenMemHandle = h_open;
  hip.hipIpcCloseMemHandle = h_close;
  hip.hipMemGetAddressRange = h_address_range;
  hip.hipMemAddressReserve = h_reserve;
  hip.hipMemAddressFree = h_address_free;
  hip.hipMemImportFromShareableHandle = h_import;
  hip.hipMemRelease = h_release;
  hip.hipMemRetainAllocationHandle = h_retain;
  hip.hipMemExportToShareableHandle = h_export;
  hip.hipMemMap = h_map;
  hip.hipMemUnmap = h_unmap;
  hip.hipMemSetAccess = h_set_access;
  hip.hipStreamWaitValue32 = h_stream_wait;
  hip.hipStreamIsCapturing = h_is_capturing;
}

}  // namespace iris::test
