// Test data for GPU all-gathers, computable per 8-byte word so that a kernel fills and checks it
// in parallel; the same functions run on the host for receive buffers in host memory.
#pragma once

#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#define IRIS_HD __host__ __device__
#else
#define IRIS_HD
#endif

namespace iris::gpu_test {

IRIS_HD inline uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Byte i of rank `rank`'s block in iteration `iteration`.
IRIS_HD inline uint8_t pattern_byte(uint64_t seed, uint32_t rank, uint64_t iteration, uint64_t i) {
  const uint64_t word = mix(mix(seed ^ (uint64_t{rank} << 48) ^ iteration) + i / 8);
  return static_cast<uint8_t>(word >> (8 * (i % 8)));
}

}  // namespace iris::gpu_test
