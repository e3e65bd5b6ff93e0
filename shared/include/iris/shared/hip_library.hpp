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
  X(hipGetDevice) \
  X(hipDeviceSynchronize) \
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
  X(hipStreamCreateWithFlags) \
  X(hipStreamSynchronize) \
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
  // Null where the runtime lacks it (then no stream is taken to be capturing).
  decltype(&::hipStreamIsCapturing) hipStreamIsCapturing = nullptr;
  // Modules, for the RCCL build's reduction kernels only: null where the runtime lacks them.
  decltype(&::hipModuleLoadData) hipModuleLoadData = nullptr;
  decltype(&::hipModuleGetFunction) hipModuleGetFunction = nullptr;
  decltype(&::hipModuleLaunchKernel) hipModuleLaunchKernel = nullptr;
  // C++ sees hipMalloc overloaded (a template too): the C entry point's type, spelled out.
  hipError_t (*hipMalloc)(void** ptr, size_t size) = nullptr;

  // "hipErrorX: text (code)" for a result code.
  std::string describe(hipError_t result) const;
  std::string library;  // the file loaded
};

// What differs between HIP releases, for the runtime actually loaded (hipRuntimeGetVersion: major
// * 10^7 + minor * 10^5 + patch), never for the headers irisd was built against (Debian's 5.2.3).
// From ROCm/clr's sources (hipamd/src/hip_vm.cpp, rocclr/device/rocm/rocdevice.cpp) and HIP's
// headers; docs/MI300.md lists them.
struct Behaviour {
  int version = 0;
  // hipIpcOpenMemHandle's flag: hipIpcMemLazyEnablePeerAccess is 0 in the 5.x headers and 0x1
  // from 6.0, and CLR 6.x refuses any other value.
  unsigned int ipc_lazy_peer_access_flag = 0;
  // hipMemImportFromShareableHandle reads osHandle as a pointer to the fd in 6.0 to 7.0; the
  // by-value form (as the API documents it) came with the 7.1 fix (ROCm/rocm-systems#759).
  bool import_fd_by_pointer = false;
  // hipMemRetainAllocationHandle takes a reference that hipMemRelease drops in 5.x; from 6.0 it
  // takes none, while hipMemRelease still drops one: releasing after retain frees memory the
  // owner still maps. Released only where the retain took a reference.
  bool retain_takes_reference = false;
  std::string text;  // "6.2.41133"
};
Behaviour behaviour_of(int runtime_version);

// Whether this process asked CLR for command-processor stream waits (GPU_STREAMOPS_CP_WAIT, a
// bool CLR reads from the environment; false by default). Without it, on ROCm 6.x, each
// hipStreamWaitValue32 runs as a one-thread kernel that holds a wave until the value arrives.
// With it, CLR accepts only signal memory (hipMallocSignalMemory) for the wait.
bool streamops_cp_wait_requested();

// Loads libamdhip64 (ROCm 7, 6, then 5; see rocm_library.hpp for where) once. Returns nullptr and
// sets `why` when there is no usable HIP runtime or it sees no AMD GPU.
const Runtime* load_runtime(std::string& why);

}  // namespace iris::hip
