// The NCCL library's element types: the small float formats round to nearest even (fp8
// saturating, as CUDA's conversions do) and round-trip every value they hold; the host's
// reductions follow the rules the GPU kernels share (integers wrap, narrow floats reduce in
// float and round once).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "client/nccl/element_types.hpp"

namespace iris::nccl {
namespace {

TEST(NcclElementTypes, HalfRoundsToNearestEvenAndOverflowsToInfinity) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // the tie past the largest rounds to infinity
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie: to even
  EXPECT_EQ(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie: to even
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);             // smallest subnormal
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(float_to_half(std::nanf("")), 0x7e00);
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float v = half_to_float(static_cast<uint16_t>(bits));
    if (std::isnan(v)) continue;
    EXPECT_EQ(float_to_half(v), bits) << std::hex << bits;
  }
}

TEST(NcclElementTypes, Bfloat16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bfloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(float_to_bfloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::max()), 0x7f80);
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float v = bfloat16_to_float(static_cast<uint16_t>(bits));
    if (std::isnan(v)) continue;
    EXPECT_EQ(float_to_bfloat16(v), bits) << std::hex << bits;
  }
}

TEST(NcclElementTypes, Fp8SaturatesAndRoundTripsEveryValue) {
  EXPECT_EQ(float_to_e4m3(1.0f), 0x38);
  EXPECT_EQ(float_to_e4m3(448.0f), 0x7e);
  EXPECT_EQ(float_to_e4m3(1000.0f), 0x7e);
  EXPECT_EQ(float_to_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -9)), 0x01);
  EXPECT_EQ(float_to_e4m3(std::nanf("")), 0x7f);
  EXPECT_EQ(float_to_e5m2(1.0f), 0x3c);
  EXPECT_EQ(float_to_e5m2(57344.0f), 0x7b);
  EXPECT_EQ(float_to_e5m2(1e6f), 0x7b);
  EXPECT_EQ(float_to_e5m2(std::ldexp(1.0f, -16)), 0x01);
  EXPECT_EQ(float_to_e5m2(9.0f), 0x48);  // 9 lies halfway between 8 and 10: to even (8)
  for (uint32_t bits = 0; bits < 0x100; ++bits) {
    const float a = e4m3_to_float(static_cast<uint8_t>(bits));
    if (!std::isnan(a)) {
      EXPECT_EQ(float_to_e4m3(a), bits) << std::hex << bits;
    }
    const float b = e5m2_to_float(static_cast<uint8_t>(bits));
    if (!std::isnan(b) && !std::isinf(b)) {
      EXPECT_EQ(float_to_e5m2(b), bits) << std::hex << bits;
    }
  }
}

TEST(NcclElementTypes, HostReductionsWrapIntegersAndRoundNarrowFloatsOnce) {
  // int8: 100 + 100 wraps; max and min compare signed values.
  const int8_t i8[3] = {100, 100, -3};
  int8_t out8 = 0;
  reduce_on_host(ElementType::kInt8, {ReduceKind::kSum}, i8, 3, 1, 1, &out8);
  EXPECT_EQ(out8, static_cast<int8_t>(197));
  reduce_on_host(ElementType::kInt8, {ReduceKind::kMin}, i8, 3, 1, 1, &out8);
  EXPECT_EQ(out8, -3);
  reduce_on_host(ElementType::kInt8, {ReduceKind::kMax}, i8, 3, 1, 1, &out8);
  EXPECT_EQ(out8, 100);
  // int32 average truncates; a pre-multiplied sum scales every rank's element.
  const int32_t i32[3] = {7, 8, -2};
  int32_t out32 = 0;
  reduce_on_host(ElementType::kInt32, {ReduceKind::kAvg}, i32, 3, 4, 1, &out32);
  EXPECT_EQ(out32, 4);
  Reduction premul{ReduceKind::kPreMulSum};
  const int32_t three = 3;
  std::memcpy(&premul.scalar_bits, &three, sizeof three);
  reduce_on_host(ElementType::kInt32, premul, i32, 3, 4, 1, &out32);
  EXPECT_EQ(out32, 39);
  // float16: 2048 + 1 + 1 is 2050 reduced in float, where adding in half would give 2048.
  const uint16_t h[3] = {float_to_half(2048), float_to_half(1), float_to_half(1)};
  uint16_t out16 = 0;
  reduce_on_host(ElementType::kFloat16, {ReduceKind::kSum}, h, 3, 2, 1, &out16);
  EXPECT_EQ(half_to_float(out16), 2050.0f);
  // Blocks a stride apart, several elements, dst one of the blocks.
  float f[2][3] = {{1, 2, 3}, {10, 20, 30}};
  reduce_on_host(ElementType::kFloat32, {ReduceKind::kProd}, f, 2, sizeof f[0], 3, f[0]);
  EXPECT_EQ(f[0][0], 10);
  EXPECT_EQ(f[0][2], 90);
}

}  // namespace
}  // namespace iris::nccl
