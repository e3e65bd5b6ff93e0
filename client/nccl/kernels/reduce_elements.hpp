// How one reduction combines its blocks element by element, for every NCCL datatype: one text for
// the host's loop (element_types.cpp) and the GPU kernels (reduce_kernels.hpp: nvcc, hiprtc), so
// that the host and both GPUs give the same bits. Integers compute unsigned (they wrap) and compare
// and divide as the stored type; 16- and 8-bit floats are widened to float, reduced in block order
// and rounded once (small_float.hpp); avg divides the sum by the number of blocks; a pre-multiplied
// sum multiplies each block's element by the scalar before adding. No standard library (hiprtc has
// none).
#pragma once

#include "small_float.hpp"

namespace iris::nccl::kernels {

// ReduceKind's values (element_types.hpp).
enum Op : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4, kPreMulSum = 5 };

// A load or store of `T` at byte address p: a plain access on a GPU (the kernels' buffers are the
// runtime's allocations, aligned), a byte copy on the host (user memory may be unaligned).
template <typename T>
IRIS_HOST_DEVICE inline T load_at(const char* p) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return *reinterpret_cast<const T*>(p);
#else
  T v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
#endif
}

template <typename T>
IRIS_HOST_DEVICE inline void store_at(char* p, T v) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  *reinterpret_cast<T*>(p) = v;
#else
  __builtin_memcpy(p, &v, sizeof v);
#endif
}

// An integer stored as `Stored`, computed as the unsigned `Compute` of its width.
template <typename Stored, typename Compute>
struct Integer {
  using C = Compute;
  static constexpr unsigned long long kBytes = sizeof(Stored);
  IRIS_HOST_DEVICE static C load(const char* p) { return static_cast<C>(load_at<Stored>(p)); }
  IRIS_HOST_DEVICE static void store(char* p, C v) { store_at<Stored>(p, static_cast<Stored>(v)); }
  IRIS_HOST_DEVICE static bool less(C a, C b) {
    return static_cast<Stored>(a) < static_cast<Stored>(b);
  }
  IRIS_HOST_DEVICE static C divide(C a, unsigned n) {
    return static_cast<C>(static_cast<Stored>(a) / static_cast<Stored>(n));
  }
};

// float and double, computed as themselves.
template <typename T>
struct Wide {
  using C = T;
  static constexpr unsigned long long kBytes = sizeof(T);
  IRIS_HOST_DEVICE static C load(const char* p) { return load_at<T>(p); }
  IRIS_HOST_DEVICE static void store(char* p, C v) { store_at<T>(p, v); }
  IRIS_HOST_DEVICE static bool less(C a, C b) { return a < b; }
  IRIS_HOST_DEVICE static C divide(C a, unsigned n) { return a / static_cast<C>(n); }
};

// A small float of `Format` held in the unsigned integer `Bits`, computed in float.
template <typename Bits, typename Format>
struct Narrow {
  using C = float;
  static constexpr unsigned long long kBytes = sizeof(Bits);
  IRIS_HOST_DEVICE static C load(const char* p) { return Format::decode(load_at<Bits>(p)); }
  IRIS_HOST_DEVICE static void store(char* p, C v) {
    store_at<Bits>(p, static_cast<Bits>(Format::encode(v)));
  }
  IRIS_HOST_DEVICE static bool less(C a, C b) { return a < b; }
  IRIS_HOST_DEVICE static C divide(C a, unsigned n) { return a / static_cast<float>(n); }
};

using Int8 = Integer<signed char, unsigned char>;
using Uint8 = Integer<unsigned char, unsigned char>;
using Int32 = Integer<int, unsigned>;
using Uint32 = Integer<unsigned, unsigned>;
using Int64 = Integer<long long, unsigned long long>;
using Uint64 = Integer<unsigned long long, unsigned long long>;
using Float16 = Narrow<unsigned short, small_float::Half>;
using Float32 = Wide<float>;
using Float64 = Wide<double>;
using Bfloat16 = Narrow<unsigned short, small_float::Bfloat16>;
using Float8e4m3 = Narrow<unsigned char, small_float::E4m3>;
using Float8e5m2 = Narrow<unsigned char, small_float::E5m2>;
using Float8e4m3Fnuz = Narrow<unsigned char, small_float::E4m3Fnuz>;
using Float8e5m2Fnuz = Narrow<unsigned char, small_float::E5m2Fnuz>;

// The pre-multiplied sum's scalar: an element at `at` (device residence) or in `bits` (host
// immediate).
template <typename Codec>
IRIS_HOST_DEVICE typename Codec::C load_scalar(unsigned long long bits, const void* at) {
  return Codec::load(at != nullptr ? static_cast<const char*>(at)
                                   : reinterpret_cast<const char*>(&bits));
}

// Elements first, first + step, ... below count of `blocks` blocks (block b at src + b * stride
// bytes) reduced into dst, which may be one of the blocks.
template <typename Codec>
IRIS_HOST_DEVICE void reduce_range(const char* src, unsigned blocks, unsigned long long stride,
                                   unsigned long long count, char* dst, int op,
                                   typename Codec::C scalar, unsigned long long first,
                                   unsigned long long step) {
  using C = typename Codec::C;
  for (unsigned long long i = first; i < count; i += step) {
    const unsigned long long at = i * Codec::kBytes;
    C acc = Codec::load(src + at);
    if (op == kPreMulSum) acc = acc * scalar;
    for (unsigned b = 1; b < blocks; ++b) {
      C x = Codec::load(src + b * stride + at);
      switch (op) {
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
        default:  // sum, avg
          acc = acc + x;
      }
    }
    if (op == kAvg) acc = Codec::divide(acc, blocks);
    Codec::store(dst + at, acc);
  }
}

}  // namespace iris::nccl::kernels
