// NCCL's element types and reductions, for both places a reduction runs: the host (host memory,
// irisd's host engine) and the GPU kernels. The rules (kernels/reduce_elements.hpp, one text for
// both) give the same bits on each: integers wrap (unsigned arithmetic); 16- and 8-bit floats are
// widened to float, reduced in rank order, and rounded once (to nearest even, saturating for fp8
// as CUDA's conversions do); avg divides the sum by the number of ranks; a pre-multiplied sum
// multiplies each rank's element by the scalar before adding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace iris::nccl {

// ncclDataType_t's values.
enum class ElementType : int {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
  kFloat8e4m3 = 10,
  kFloat8e5m2 = 11,
};
inline constexpr int kElementTypeCount = 12;

// nullopt for a value no ncclDataType_t has.
std::optional<ElementType> element_type(int value);
std::size_t element_bytes(ElementType type);
const char* element_name(ElementType type);

enum class ReduceKind : uint8_t { kSum, kProd, kMax, kMin, kAvg, kPreMulSum };
const char* reduce_name(ReduceKind kind);

// A reduction as one operation applies it. For kPreMulSum the scalar is an element of the
// operation's type: its bits (host immediate) or where it lies (device residence: the GPU
// kernel reads it; on the host it is read from host memory).
struct Reduction {
  ReduceKind kind = ReduceKind::kSum;
  uint64_t scalar_bits = 0;
  const void* scalar_at = nullptr;
};

// Reduces `blocks` blocks of `count` elements, block b at src + b * stride_bytes, into dst, in
// block order. dst may be one of the blocks.
void reduce_on_host(ElementType type, const Reduction& reduction, const void* src,
                    std::size_t blocks, std::size_t stride_bytes, std::size_t count, void* dst);

// The small float formats, as bits in and out of float (exposed for the tests' references).
float half_to_float(uint16_t bits);
uint16_t float_to_half(float value);
float bfloat16_to_float(uint16_t bits);
uint16_t float_to_bfloat16(float value);
float e4m3_to_float(uint8_t bits);
uint8_t float_to_e4m3(float value);
float e5m2_to_float(uint8_t bits);
uint8_t float_to_e5m2(float value);

}  // namespace iris::nccl
