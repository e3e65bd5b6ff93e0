// Reproducible test data for all-gathers: the bytes rank r sends in iteration i are a function
// of (seed, r, i), so every rank can check every block it receives without any other channel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace iris::example {

inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline uint64_t block_seed(uint64_t seed, uint32_t rank, uint64_t iteration) {
  uint64_t s = seed ^ (uint64_t{rank} << 48) ^ (iteration * 0x2545f4914f6cdd1dull);
  return splitmix64(s);
}

// Fills `bytes` with rank `rank`'s data for `iteration`; `invert` writes the complement, which
// differs from the real data in every byte (used to poison receive buffers).
inline void fill_block(void* dst, std::size_t bytes, uint64_t seed, uint32_t rank,
                       uint64_t iteration, bool invert = false) {
  uint64_t state = block_seed(seed, rank, iteration);
  auto* out = static_cast<unsigned char*>(dst);
  const uint64_t mask = invert ? ~0ull : 0ull;
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    const uint64_t v = splitmix64(state) ^ mask;
    std::memcpy(out + i, &v, 8);
  }
  if (i < bytes) {
    const uint64_t v = splitmix64(state) ^ mask;
    std::memcpy(out + i, &v, bytes - i);
  }
}

// Returns the index of the first byte that differs from rank's data, or `bytes` if none does.
inline std::size_t check_block(const void* src, std::size_t bytes, uint64_t seed, uint32_t rank,
                               uint64_t iteration) {
  uint64_t state = block_seed(seed, rank, iteration);
  const auto* in = static_cast<const unsigned char*>(src);
  for (std::size_t i = 0; i < bytes; i += 8) {
    const uint64_t v = splitmix64(state);
    unsigned char expected[8];
    std::memcpy(expected, &v, 8);
    const std::size_t n = bytes - i < 8 ? bytes - i : 8;
    for (std::size_t k = 0; k < n; ++k)
      if (in[i + k] != expected[k]) return i + k;
  }
  return bytes;
}

}  // namespace iris::example
