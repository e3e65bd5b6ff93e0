// A CUDA driver table that needs no GPU: two devices with a given number of copy engines, streams
// and pinned memory it counts, calls that fail where a test says, and the copies it was asked for
// (which stream each went to), and the stream counter writes it holds back until a test lands
// them (land_writes: the streams' copies have ended). For tests of the cuda engine's own logic.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <utility>
#include <vector>

#include "iris/shared/cuda_library.hpp"

namespace iris::daemon::fake_cuda {

// The fake driver's state: live resources, and which call of which kind fails.
struct FakeDriverState {
  int retained_contexts = 0;
  std::set<void*> pinned;
  std::set<CUstream> streams;
  int stream_creates = 0;
  int fail_stream_create_at = -1;  // 0-based call index; -1 never
  bool fail_host_alloc = false;
  int fail_retain_of_device = -1;
  int copy_engines = 2;  // per device (ASYNC_ENGINE_COUNT)
  // Copies issued, in order: the stream and the bytes.
  struct Copy {
    CUstream stream;
    size_t bytes;
  };
  std::vector<Copy> copies;
  // cuStreamWriteValue32 calls not yet landed: the address (a pinned host word) and the value.
  std::vector<std::pair<CUdeviceptr, cuuint32_t>> writes;
};
inline FakeDriverState fake;

// The counter writes the streams were asked for land, as once the copies before them ended.
inline void land_writes() {
  for (const auto& [address, value] : fake.writes)
    reinterpret_cast<std::atomic<uint32_t>*>(address)->store(value, std::memory_order_release);
  fake.writes.clear();
}

inline cuda::Driver fake_driver() {
  cuda::Driver d;
  d.cuGetErrorString = [](CUresult, const char** s) -> CUresult {
    *s = "injected failure";
    return CUDA_SUCCESS;
  };
  d.cuDriverGetVersion = [](int* v) -> CUresult {
    *v = 13000;
    return CUDA_SUCCESS;
  };
  d.cuDeviceGetCount = [](int* n) -> CUresult {
    *n = 2;
    return CUDA_SUCCESS;
  };
  d.cuDeviceGet = [](CUdevice* dev, int i) -> CUresult {
    *dev = i;
    return CUDA_SUCCESS;
  };
  d.cuDeviceGetName = [](char* name, int, CUdevice) -> CUresult {
    name[0] = 'G';
    return CUDA_SUCCESS;
  };
  d.cuDeviceGetPCIBusId = [](char* bus, int, CUdevice dev) -> CUresult {
    bus[0] = static_cast<char>('0' + dev);
    return CUDA_SUCCESS;
  };
  d.cuDeviceTotalMem = [](size_t* bytes, CUdevice) -> CUresult {
    *bytes = 1 << 30;
    return CUDA_SUCCESS;
  };
  d.cuDeviceGetAttribute = [](int* v, CUdevice_attribute attribute, CUdevice) -> CUresult {
    *v = attribute == CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT ? fake.copy_engines : 2;
    return CUDA_SUCCESS;
  };
  d.cuDevicePrimaryCtxRetain = [](CUcontext* ctx, CUdevice dev) -> CUresult {
    if (dev == fake.fail_retain_of_device) return CUDA_ERROR_OUT_OF_MEMORY;
    ++fake.retained_contexts;
    *ctx = reinterpret_cast<CUcontext>(static_cast<uintptr_t>(0x100 + dev));
    return CUDA_SUCCESS;
  };
  d.cuDevicePrimaryCtxRelease = [](CUdevice) -> CUresult {
    --fake.retained_contexts;
    return CUDA_SUCCESS;
  };
  d.cuDeviceCanAccessPeer = [](int* can, CUdevice, CUdevice) -> CUresult {
    *can = 0;
    return CUDA_SUCCESS;
  };
  d.cuCtxGetCurrent = [](CUcontext* ctx) -> CUresult {
    *ctx = nullptr;
    return CUDA_SUCCESS;
  };
  d.cuCtxSetCurrent = [](CUcontext) -> CUresult { return CUDA_SUCCESS; };
  d.cuMemHostAlloc = [](void** p, size_t bytes, unsigned) -> CUresult {
    if (fake.fail_host_alloc) return CUDA_ERROR_OUT_OF_MEMORY;
    *p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    fake.pinned.insert(*p);
    return CUDA_SUCCESS;
  };
  d.cuMemFreeHost = [](void* p) -> CUresult {
    fake.pinned.erase(p);
    std::free(p);
    return CUDA_SUCCESS;
  };
  d.cuMemHostGetDevicePointer = [](CUdeviceptr* dev, void* p, unsigned) -> CUresult {
    *dev = reinterpret_cast<CUdeviceptr>(p);
    return CUDA_SUCCESS;
  };
  d.cuStreamCreate = [](CUstream* s, unsigned) -> CUresult {
    if (fake.stream_creates++ == fake.fail_stream_create_at) return CUDA_ERROR_OUT_OF_MEMORY;
    *s = reinterpret_cast<CUstream>(static_cast<uintptr_t>(0x1000 + fake.stream_creates));
    fake.streams.insert(*s);
    return CUDA_SUCCESS;
  };
  d.cuStreamSynchronize = [](CUstream) -> CUresult { return CUDA_SUCCESS; };
  d.cuStreamDestroy = [](CUstream s) -> CUresult {
    fake.streams.erase(s);
    return CUDA_SUCCESS;
  };
  d.cuMemcpyAsync = [](CUdeviceptr, CUdeviceptr, size_t bytes, CUstream s) -> CUresult {
    fake.copies.push_back({s, bytes});
    return CUDA_SUCCESS;
  };
  d.cuStreamWriteValue32 = [](CUstream, CUdeviceptr address, cuuint32_t value,
                              unsigned) -> CUresult {
    fake.writes.emplace_back(address, value);
    return CUDA_SUCCESS;
  };
  return d;
}

}  // namespace iris::daemon::fake_cuda
