// libiris_torch.so: iris_torch_alloc / iris_torch_free, an allocator for PyTorch's
// CUDAPluggableAllocator, so that a torch.cuda.MemPool hands out memory whose registrations with
// irisd end when PyTorch frees it, not when a lookup later finds it gone. A library of its own,
// beside libiris (which it calls through iris_gpu_memory_freed): only PyTorch jobs load it.
// cuMemAlloc on `device`'s primary context; NULL when the memory cannot be allocated.
#include <cstdio>
#include <mutex>
#include <string>

#include "iris/iris.h"

#ifdef IRIS_HAVE_CUDA
#include "iris/shared/cuda_library.hpp"
#endif

namespace {

#ifdef IRIS_HAVE_CUDA
const iris::cuda::Driver* driver() {
  static const iris::cuda::Driver* cu = [] {
    std::string why;
    const iris::cuda::Driver* loaded = iris::cuda::load_driver(why);
    if (loaded == nullptr) std::fprintf(stderr, "iris_torch_alloc: %s\n", why.c_str());
    return loaded;
  }();
  return cu;
}

// Runs `f` with `device`'s primary context current (the one the CUDA runtime, and so PyTorch,
// uses), then restores the thread's context.
template <typename F>
CUresult in_primary_context(const iris::cuda::Driver& cu, int device, F&& f) {
  CUdevice dev = 0;
  CUcontext primary = nullptr, previous = nullptr;
  CUresult r = cu.cuDeviceGet(&dev, device);
  if (r == CUDA_SUCCESS) r = cu.cuDevicePrimaryCtxRetain(&primary, dev);
  if (r != CUDA_SUCCESS) return r;
  cu.cuCtxGetCurrent(&previous);
  r = cu.cuCtxSetCurrent(primary);
  if (r == CUDA_SUCCESS) r = f();
  cu.cuCtxSetCurrent(previous);
  cu.cuDevicePrimaryCtxRelease(dev);
  return r;
}
#endif

}  // namespace

extern "C" __attribute__((visibility("default"))) void* iris_torch_alloc(ssize_t bytes, int device,
                                                                         void* /*stream*/) {
#ifdef IRIS_HAVE_CUDA
  const iris::cuda::Driver* cu = driver();
  if (cu == nullptr || bytes <= 0) return nullptr;
  CUdeviceptr ptr = 0;
  const CUresult r = in_primary_context(
      *cu, device, [&] { return cu->cuMemAlloc(&ptr, static_cast<std::size_t>(bytes)); });
  // PyTorch turns a null result into its out-of-memory error.
  return r == CUDA_SUCCESS ? reinterpret_cast<void*>(ptr) : nullptr;
#else
  (void)bytes;
  (void)device;
  return nullptr;
#endif
}

extern "C" __attribute__((visibility("default"))) void iris_torch_free(void* ptr, ssize_t bytes,
                                                                       int device,
                                                                       void* /*stream*/) {
  if (ptr == nullptr) return;
  iris_gpu_memory_freed(ptr, bytes > 0 ? static_cast<std::size_t>(bytes) : 1);
#ifdef IRIS_HAVE_CUDA
  if (const iris::cuda::Driver* cu = driver())
    in_primary_context(*cu, device,
                       [&] { return cu->cuMemFree(reinterpret_cast<CUdeviceptr>(ptr)); });
#else
  (void)device;
#endif
}
