// HIP's run-time compiler (hiprtc), loaded at run time like the HIP runtime (hip_library.hpp). The
// RCCL build of irisd's NCCL library compiles its reduction kernels with it on the node, for the
// GPU there: the build machine's compiler (Debian's ROCm 5.2.3) knows no MI300 instruction set.
// ROCm 5.3 and later ship it as libhiprtc.so.<major>; earlier releases have it inside
// libamdhip64, which is tried last. The entry points' signatures are the same in ROCm 5 to 7.
#pragma once

#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hiprtc.h>

#include <string>

namespace iris::hiprtc {

// clang-format off
#define IRIS_HIPRTC_FUNCTIONS(X) \
  X(hiprtcGetErrorString) \
  X(hiprtcCreateProgram) \
  X(hiprtcCompileProgram) \
  X(hiprtcGetProgramLogSize) \
  X(hiprtcGetProgramLog) \
  X(hiprtcGetCodeSize) \
  X(hiprtcGetCode) \
  X(hiprtcDestroyProgram)
// clang-format on

struct Compiler {
#define IRIS_HIPRTC_DECLARE(name) decltype(&::name) name = nullptr;
  IRIS_HIPRTC_FUNCTIONS(IRIS_HIPRTC_DECLARE)
#undef IRIS_HIPRTC_DECLARE
  std::string library;  // the file loaded

  // "HIPRTC_ERROR_X (code)" for a result code.
  std::string describe(hiprtcResult result) const;
};

// Loads hiprtc once (`hip_runtime_library`: the HIP runtime's file, searched last). Returns
// nullptr and sets `why` where there is none.
const Compiler* load_compiler(const std::string& hip_runtime_library, std::string& why);

}  // namespace iris::hiprtc
