// The HIP runtime API, loaded at run time (dlopen of libamdhip64) so that irisd and libiris start
// on machines without ROCm. Types come from ROCm's hip_runtime_api.h at build time (Debian 12
// ships ROCm 5.2.3); only entry points whose signatures are the same in ROCm 5 and 6 are used
// (hipPointerAttribute_t, whose layout changed in ROCm 6, is not).
#pragma once

#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>

#include <string>

namespace iris::hip {

// clang-format off
#define IRIS_HIP_RUNTIME_FUNCTIONS(X) \
  X(hipGetErrorString) \
  X(hipRuntimeGetVersion) \
  X(hipGetDeviceCount) \
  X(hipSetDevice) \
  X(hipDeviceGetPCIBusId) \
  X(hipPointerGetAttribute) \
  X(hipMemGetAddressRange) \
  X(hipIpcGetMemHandle) \
  X(hipIpcOpenMemHandle) \
  X(hipIpcCloseMemHandle) \
  X(hipFree) \
  X(hipMemsetD32) \
  X(hipHostRegister) \
  X(hipHostUnregister) \
  X(hipHostGetDevicePointer) \
  X(hipMemcpyAsync) \
  X(hipStreamWriteValue32) \
  X(hipStreamWaitValue32) \
  X(hipMemRetainAllocationHandle) \
  X(hipMemExportToShareableHandle) \
  X(hipMemImportFromShareableHandle) \
  X(hipMemAddressReserve) \
  X(hipMemAddressFree) \
  X(hipMemMap) \
  X(hipMemUnmap) \
  X(hipMemSetAccess) \
  X(hipMemRelease)
// clang-format on

struct Runtime {
#define IRIS_HIP_DECLARE(name) decltype(&::name) name = nullptr;
  IRIS_HIP_RUNTIME_FUNCTIONS(IRIS_HIP_DECLARE)
#undef IRIS_HIP_DECLARE
  // C++ sees hipMalloc overloaded (a template too): the C entry point's type, spelled out.
  hipError_t (*hipMalloc)(void** ptr, size_t size) = nullptr;

  // "hipErrorX: text (code)" for a result code.
  std::string describe(hipError_t result) const;
};

// Loads libamdhip64 (ROCm 6, then 5) once. Returns nullptr and sets `why` when there is no usable
// HIP runtime or it sees no AMD GPU.
const Runtime* load_runtime(std::string& why);

}  // namespace iris::hip
