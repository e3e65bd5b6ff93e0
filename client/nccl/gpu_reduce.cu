// The reduction kernels of irisd's NCCL library: one per element type, each reducing `blocks`
// blocks of `count` elements (block b at src + b * stride bytes) into dst, by the rules of
// element_types.hpp (the host's reduce_on_host gives the same bits). Built into a fatbin that the
// library loads through the driver API, so that it needs no CUDA runtime.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace {

// ReduceKind's values (element_types.hpp).
enum Kind : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4, kPreMulSum = 5 };

template <typename Stored, typename Compute>
struct Integer {
  using C = Compute;
  __device__ static C load(const char* p, unsigned long long i) {
    return static_cast<C>(reinterpret_cast<const Stored*>(p)[i]);
  }
  __device__ static void store(char* p, unsigned long long i, C v) {
    reinterpret_cast<Stored*>(p)[i] = static_cast<Stored>(v);
  }
  __device__ static bool less(C a, C b) { return static_cast<Stored>(a) < static_cast<Stored>(b); }
  __device__ static C divide(C a, unsigned n) {
    return static_cast<C>(static_cast<Stored>(a) / static_cast<Stored>(n));
  }
};

template <typename Stored>
struct Wide {
  using C = Stored;
  __device__ static C load(const char* p, unsigned long long i) {
    return reinterpret_cast<const Stored*>(p)[i];
  }
  __device__ static void store(char* p, unsigned long long i, C v) {
    reinterpret_cast<Stored*>(p)[i] = v;
  }
  __device__ static bool less(C a, C b) { return a < b; }
  __device__ static C divide(C a, unsigned n) { return a / static_cast<C>(n); }
};

template <typename Stored>
struct Narrow {
  using C = float;
  __device__ static C load(const char* p, unsigned long long i) {
    return static_cast<float>(reinterpret_cast<const Stored*>(p)[i]);
  }
  __device__ static void store(char* p, unsigned long long i, C v) {
    reinterpret_cast<Stored*>(p)[i] = Stored(v);  // round to nearest even; fp8 saturates
  }
  __device__ static bool less(C a, C b) { return a < b; }
  __device__ static C divide(C a, unsigned n) { return a / static_cast<float>(n); }
};

template <typename Codec>
__device__ void reduce(const char* src, unsigned blocks, unsigned long long stride,
                       unsigned long long count, char* dst, int kind,
                       unsigned long long scalar_bits, const void* scalar_at) {
  using C = typename Codec::C;
  C scalar{};
  if (kind == kPreMulSum)
    scalar = Codec::load(scalar_at != nullptr ? static_cast<const char*>(scalar_at)
                                              : reinterpret_cast<const char*>(&scalar_bits),
                         0);
  for (unsigned long long i =
           blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x;
       i < count; i += static_cast<unsigned long long>(gridDim.x) * blockDim.x) {
    C acc = Codec::load(src, i);
    if (kind == kPreMulSum) acc = acc * scalar;
    for (unsigned b = 1; b < blocks; ++b) {
      C x = Codec::load(src + b * stride, i);
      switch (kind) {
        case kProd:
          acc = acc * x;
          break;
        case kMax:
          acc = Codec::less(acc, x) ? x : acc;
          break;
        case kMin:
          acc = Codec::less(x, acc) ? x : acc;
          break;
        case kPreMulSum:
          acc = acc + x * scalar;
          break;
        default:
          acc = acc + x;
      }
    }
    if (kind == kAvg) acc = Codec::divide(acc, blocks);
    Codec::store(dst, i, acc);
  }
}

using Int8 = Integer<int8_t, uint8_t>;
using Uint8 = Integer<uint8_t, uint8_t>;
using Int32 = Integer<int32_t, uint32_t>;
using Uint32 = Integer<uint32_t, uint32_t>;
using Int64 = Integer<int64_t, unsigned long long>;
using Uint64 = Integer<uint64_t, unsigned long long>;

}  // namespace

#define IRIS_NCCL_REDUCE_KERNEL(name, codec)                                                 \
  extern "C" __global__ void iris_nccl_reduce_##name(                                        \
      const char* src, unsigned blocks, unsigned long long stride, unsigned long long count, \
      char* dst, int kind, unsigned long long scalar_bits, const void* scalar_at) {          \
    reduce<codec>(src, blocks, stride, count, dst, kind, scalar_bits, scalar_at);            \
  }

IRIS_NCCL_REDUCE_KERNEL(int8, Int8)
IRIS_NCCL_REDUCE_KERNEL(uint8, Uint8)
IRIS_NCCL_REDUCE_KERNEL(int32, Int32)
IRIS_NCCL_REDUCE_KERNEL(uint32, Uint32)
IRIS_NCCL_REDUCE_KERNEL(int64, Int64)
IRIS_NCCL_REDUCE_KERNEL(uint64, Uint64)
IRIS_NCCL_REDUCE_KERNEL(float16, Narrow<__half>)
IRIS_NCCL_REDUCE_KERNEL(float32, Wide<float>)
IRIS_NCCL_REDUCE_KERNEL(float64, Wide<double>)
IRIS_NCCL_REDUCE_KERNEL(bfloat16, Narrow<__nv_bfloat16>)
IRIS_NCCL_REDUCE_KERNEL(float8e4m3, Narrow<__nv_fp8_e4m3>)
IRIS_NCCL_REDUCE_KERNEL(float8e5m2, Narrow<__nv_fp8_e5m2>)
