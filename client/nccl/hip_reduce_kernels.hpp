// The RCCL build's reduction kernels: the text of kernels/ (the same the CUDA build's fatbin and
// the host's reductions come from), compiled on the node by HIP's run-time compiler for the
// instruction set KFD reports for the GPU (gfx942 on MI300X), once per process and instruction
// set, and loaded once per device. Compiled at run time because the build's compiler (Debian's
// ROCm 5.2.3) knows no MI300 instruction set; the first reduction of a process pays the compile.
#pragma once

#include "client/nccl/element_types.hpp"
#include "client/nccl/gpu_runtime_loader.hpp"
#include "iris/shared/hip_library.hpp"

namespace iris::nccl {

// The HIP runtime the RCCL build's GPU side calls, and its error check.
using HipRuntime = GpuRuntimeLoader<hip::Runtime, &hip::load_runtime>;

// The kernel for `type` on HIP device `device`, which is current. Throws NcclError saying what is
// missing (hiprtc, KFD's report of the GPU) or what the compiler said.
hipFunction_t hip_reduce_kernel(const hip::Runtime& hip, int device, ElementType type);

}  // namespace iris::nccl
