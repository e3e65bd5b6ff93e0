// The CUDA driver API, loaded at run time (dlopen of libcuda.so.1) so that irisd and libiris
// start on machines without an NVIDIA driver. Types come from the toolkit's cuda.h at build time;
// nothing links against libcuda.
#pragma once

#include <cuda.h>

#include <string>

namespace iris::cuda {

// Versioned entry points (cuda.h maps e.g. cuMemHostRegister to cuMemHostRegister_v2): the
// member names go through the same macros, so each pointer has its real symbol's type.
// clang-format off
#define IRIS_CUDA_DRIVER_FUNCTIONS(X) \
  X(cuInit) \
  X(cuDriverGetVersion) \
  X(cuGetErrorString) \
  X(cuDeviceGetCount) \
  X(cuDeviceGet) \
  X(cuDeviceGetName) \
  X(cuDeviceGetPCIBusId) \
  X(cuDeviceGetByPCIBusId) \
  X(cuDeviceTotalMem) \
  X(cuDeviceGetAttribute) \
  X(cuDeviceCanAccessPeer) \
  X(cuDevicePrimaryCtxRetain) \
  X(cuDevicePrimaryCtxRelease) \
  X(cuCtxSetCurrent) \
  X(cuCtxGetCurrent) \
  X(cuCtxEnablePeerAccess) \
  X(cuCtxGetDevice) \
  X(cuCtxSynchronize) \
  X(cuEventCreate) \
  X(cuEventRecord) \
  X(cuEventDestroy) \
  X(cuStreamWaitEvent) \
  X(cuModuleLoadData) \
  X(cuModuleGetFunction) \
  X(cuLaunchKernel) \
  X(cuMemcpyDtoH) \
  X(cuStreamCreate) \
  X(cuStreamDestroy) \
  X(cuStreamSynchronize) \
  X(cuStreamWriteValue32) \
  X(cuStreamWaitValue32) \
  X(cuStreamIsCapturing) \
  X(cuThreadExchangeStreamCaptureMode) \
  X(cuUserObjectCreate) \
  X(cuGraphRetainUserObject) \
  X(cuMemcpyAsync) \
  X(cuIpcGetMemHandle) \
  X(cuIpcOpenMemHandle) \
  X(cuIpcCloseMemHandle) \
  X(cuMemHostRegister) \
  X(cuMemHostUnregister) \
  X(cuMemHostAlloc) \
  X(cuMemFreeHost) \
  X(cuMemHostGetDevicePointer) \
  X(cuMemGetAddressRange) \
  X(cuPointerGetAttribute) \
  X(cuPointerGetAttributes) \
  X(cuMemAlloc) \
  X(cuMemFree) \
  X(cuMemsetD32) \
  X(cuMemGetInfo) \
  X(cuMemRetainAllocationHandle) \
  X(cuMemExportToShareableHandle) \
  X(cuMemImportFromShareableHandle) \
  X(cuMemRelease) \
  X(cuMemAddressReserve) \
  X(cuMemAddressFree) \
  X(cuMemMap) \
  X(cuMemUnmap) \
  X(cuMemSetAccess)
// clang-format on

// Entry points of newer drivers only: null where the driver lacks them.
// clang-format off
#define IRIS_CUDA_OPTIONAL_FUNCTIONS(X) \
  X(cuMemcpyBatchAsync)  /* CUDA 12.8 */ \
  X(cuStreamGetCaptureInfo)  /* _v3, CUDA 12.3: the graph a stream captures into */
// clang-format on

struct Driver {
#define IRIS_CUDA_DECLARE(name) decltype(&::name) name = nullptr;
  IRIS_CUDA_DRIVER_FUNCTIONS(IRIS_CUDA_DECLARE)
  IRIS_CUDA_OPTIONAL_FUNCTIONS(IRIS_CUDA_DECLARE)
#undef IRIS_CUDA_DECLARE

  // "CUDA_ERROR_...: text" for a result code.
  std::string describe(CUresult result) const;
};

// Loads libcuda.so.1 once and calls cuInit(0). Returns nullptr and sets `why` when there is no
// usable driver (not installed, too old, no device node access, cuInit failed).
const Driver* load_driver(std::string& why);

}  // namespace iris::cuda
