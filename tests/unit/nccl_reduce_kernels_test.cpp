// The GPU reduction kernels' text (client/nccl/kernels/reduce_kernels.hpp, which nvcc and hiprtc
// compile) run on the host: each kernel over a grid of blocks and threads, one thread at a time,
// must write what the host's reduction writes for every element type and reduction, in place and
// not, with counts that leave the last block of threads partly idle. What this cannot show (the
// GPU's arithmetic, the launch) the GPU tests check on the GPU host.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "client/nccl/element_types.hpp"

// What a GPU compiler provides, for the kernels' text compiled as host code.
#define __global__
#define __device__
struct HostDim3 {
  unsigned x = 0, y = 0, z = 0;
};
HostDim3 blockIdx, threadIdx, blockDim, gridDim;
#include "client/nccl/kernels/reduce_kernels.hpp"

namespace iris::nccl {
namespace {

using Kernel = void (*)(const char*, unsigned, unsigned long long, unsigned long long, char*, int,
                        unsigned long long, const void*);

// By ncclDataType_t value, as element_name() names them.
const Kernel kKernels[kElementTypeCount] = {
    iris_nccl_reduce_int8,     iris_nccl_reduce_uint8,      iris_nccl_reduce_int32,
    iris_nccl_reduce_uint32,   iris_nccl_reduce_int64,      iris_nccl_reduce_uint64,
    iris_nccl_reduce_float16,  iris_nccl_reduce_float32,    iris_nccl_reduce_float64,
    iris_nccl_reduce_bfloat16, iris_nccl_reduce_float8e4m3, iris_nccl_reduce_float8e5m2,
};

void launch(Kernel kernel, unsigned grid, unsigned threads, const char* src, unsigned blocks,
            unsigned long long stride, unsigned long long count, char* dst, int op,
            unsigned long long scalar_bits) {
  gridDim.x = grid;
  blockDim.x = threads;
  for (blockIdx.x = 0; blockIdx.x < grid; ++blockIdx.x)
    for (threadIdx.x = 0; threadIdx.x < threads; ++threadIdx.x)
      kernel(src, blocks, stride, count, dst, op, scalar_bits, nullptr);
}

TEST(NcclReduceKernels, EveryKernelWritesWhatTheHostReductionWrites) {
  std::mt19937_64 random(7);
  constexpr std::size_t kBlocks = 3, kCount = 1000;
  constexpr ReduceKind kKinds[] = {ReduceKind::kSum, ReduceKind::kProd, ReduceKind::kMax,
                                   ReduceKind::kMin, ReduceKind::kAvg,  ReduceKind::kPreMulSum};
  for (int t = 0; t < kElementTypeCount; ++t) {
    const auto type = static_cast<ElementType>(t);
    const std::size_t bytes = element_bytes(type), stride = kCount * bytes + 8;
    std::vector<char> src(kBlocks * stride);
    for (char& c : src) c = static_cast<char>(random());
    for (ReduceKind kind : kKinds) {
      Reduction reduction{kind};
      reduction.scalar_bits = 0;
      std::memcpy(&reduction.scalar_bits, src.data() + 1, bytes);
      std::vector<char> want(kCount * bytes), got(kCount * bytes);
      reduce_on_host(type, reduction, src.data(), kBlocks, stride, kCount, want.data());
      // 3 blocks of 128 threads: fewer threads than elements, the last pass partly idle.
      launch(kKernels[t], 3, 128, src.data(), kBlocks, stride, kCount, got.data(),
             static_cast<int>(kind), reduction.scalar_bits);
      EXPECT_EQ(got, want) << element_name(type) << " " << reduce_name(kind);
      // In place, into the first block.
      std::vector<char> in_place = src;
      launch(kKernels[t], 8, 256, in_place.data(), kBlocks, stride, kCount, in_place.data(),
             static_cast<int>(kind), reduction.scalar_bits);
      EXPECT_EQ(std::vector<char>(in_place.begin(), in_place.begin() + kCount * bytes), want)
          << element_name(type) << " " << reduce_name(kind) << " in place";
    }
  }
}

}  // namespace
}  // namespace iris::nccl
