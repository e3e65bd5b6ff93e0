// The GPU runtime a build's GPU side calls (the CUDA driver in stream_operation.cpp, the HIP
// runtime in hip_stream_operation.cpp), loaded at run time so that the library loads on machines
// without one.
#pragma once

#include <string>

#include "client/nccl/nccl_errors.hpp"

namespace iris::nccl {

// `Load` fills `why` and returns null where there is no usable runtime.
template <typename Runtime, const Runtime* (*Load)(std::string& why)>
struct GpuRuntimeLoader {
  // Null without a runtime (the host paths go on).
  static const Runtime* loaded() {
    static const Runtime* runtime = [] {
      std::string why;
      return Load(why);
    }();
    return runtime;
  }
  // Throws ncclUnhandledCudaError saying why there is none.
  static const Runtime& required() {
    if (const Runtime* runtime = loaded()) return *runtime;
    std::string why;
    Load(why);
    throw NcclError(ncclUnhandledCudaError, why);
  }
  // Throws ncclUnhandledCudaError naming `what` and the runtime's reason unless `result` is
  // success (0 in both runtimes: CUDA_SUCCESS, hipSuccess).
  template <typename Result>
  static void check(Result result, const char* what) {
    if (result != Result{})
      throw NcclError(ncclUnhandledCudaError,
                      std::string(what) + " failed: " + required().describe(result));
  }
};

}  // namespace iris::nccl
