// The reduction kernels of irisd's NCCL library, one per element type, each reducing `blocks`
// blocks of `count` elements (block b at src + b * stride bytes) into dst by reduce_elements.hpp's
// rules, a grid-stride loop over the elements. One text, compiled three ways: by nvcc into the
// CUDA build's fatbin (gpu_reduce.cu), by hiprtc at run time for the AMD GPU in use (the RCCL
// build: no compiler for MI300's instruction set is among the build's packages), and for the host
// by the unit tests, which run these kernels over a loop of blocks and threads.
//
// fp8 follows the GPU: on gfx940-gfx942 (MI300-series) RCCL's ncclFloat8e4m3 and ncclFloat8e5m2
// are the FNUZ variants, elsewhere (NVIDIA, MI350's gfx950) the OCP formats; the tests define
// IRIS_NCCL_FP8_FNUZ to run the former on the host.
#pragma once

#include "reduce_elements.hpp"

#if defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__)
#define IRIS_NCCL_FP8_FNUZ 1
#endif

namespace iris::nccl::kernels {

#ifdef IRIS_NCCL_FP8_FNUZ
using GpuFloat8e4m3 = Float8e4m3Fnuz;
using GpuFloat8e5m2 = Float8e5m2Fnuz;
#else
using GpuFloat8e4m3 = Float8e4m3;
using GpuFloat8e5m2 = Float8e5m2;
#endif

template <typename Codec>
__device__ void reduce(const char* src, unsigned blocks, unsigned long long stride,
                       unsigned long long count, char* dst, int op, unsigned long long scalar_bits,
                       const void* scalar_at) {
  typename Codec::C scalar{};
  if (op == kPreMulSum) scalar = load_scalar<Codec>(scalar_bits, scalar_at);
  const unsigned long long first =
      blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x;
  reduce_range<Codec>(src, blocks, stride, count, dst, op, scalar, first,
                      static_cast<unsigned long long>(gridDim.x) * blockDim.x);
}

}  // namespace iris::nccl::kernels

// The kernels' names: iris_nccl_reduce_ and element_name()'s.
#define IRIS_NCCL_REDUCE_KERNEL(name, codec)                                                     \
  extern "C" __global__ void iris_nccl_reduce_##name(                                            \
      const char* src, unsigned blocks, unsigned long long stride, unsigned long long count,     \
      char* dst, int op, unsigned long long scalar_bits, const void* scalar_at) {                \
    ::iris::nccl::kernels::reduce<::iris::nccl::kernels::codec>(src, blocks, stride, count, dst, \
                                                                op, scalar_bits, scalar_at);     \
  }

IRIS_NCCL_REDUCE_KERNEL(int8, Int8)
IRIS_NCCL_REDUCE_KERNEL(uint8, Uint8)
IRIS_NCCL_REDUCE_KERNEL(int32, Int32)
IRIS_NCCL_REDUCE_KERNEL(uint32, Uint32)
IRIS_NCCL_REDUCE_KERNEL(int64, Int64)
IRIS_NCCL_REDUCE_KERNEL(uint64, Uint64)
IRIS_NCCL_REDUCE_KERNEL(float16, Float16)
IRIS_NCCL_REDUCE_KERNEL(float32, Float32)
IRIS_NCCL_REDUCE_KERNEL(float64, Float64)
IRIS_NCCL_REDUCE_KERNEL(bfloat16, Bfloat16)
IRIS_NCCL_REDUCE_KERNEL(float8e4m3, GpuFloat8e4m3)
IRIS_NCCL_REDUCE_KERNEL(float8e5m2, GpuFloat8e5m2)

#undef IRIS_NCCL_REDUCE_KERNEL
