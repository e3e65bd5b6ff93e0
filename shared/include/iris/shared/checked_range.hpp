// Overflow-safe arithmetic for validating offsets and sizes that come from untrusted clients.
#pragma once

#include <cstdint>
#include <optional>

namespace iris {

inline std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// True when [offset, offset + length) lies inside a buffer of `size` bytes.
inline bool range_within(uint64_t offset, uint64_t length, uint64_t size) {
  auto end = checked_add(offset, length);
  return end && *end <= size;
}

// True when [a, a + a_len) and [b, b + b_len) share a byte; both ranges already validated.
inline bool ranges_overlap(uint64_t a, uint64_t a_len, uint64_t b, uint64_t b_len) {
  return a_len != 0 && b_len != 0 && a < b + b_len && b < a + a_len;
}

}  // namespace iris
