// The small float formats of kernels/small_float.hpp against a reference written from the
// formats' definitions in double arithmetic: every bit pattern decodes to its value; every value
// between two neighbours rounds to the nearer, a tie to the even one; past the largest value a
// format saturates or overflows to infinity as documented; FNUZ formats have one NaN and no
// negative zero. Every format the reductions use, on the host (the GPU kernels compile this text).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "client/nccl/kernels/small_float.hpp"

namespace iris::nccl::small_float {
namespace {

struct Spec {
  const char* name;
  int exponent_bits, mantissa_bits, bias;
  Specials kind;
  bool saturates;  // past the largest finite value
  float (*decode)(unsigned);
  unsigned (*encode)(float);
};

template <typename F>
Spec spec_of(const char* name, int e, int m, int bias, Specials kind, bool saturates) {
  return {name, e, m, bias, kind, saturates, &F::decode, &F::encode};
}

const Spec kSpecs[] = {
    spec_of<Half>("float16", 5, 10, 15, kIeee, false),
    spec_of<Bfloat16>("bfloat16", 8, 7, 127, kIeee, false),
    spec_of<E4m3>("e4m3", 4, 3, 7, kNanAtTop, true),
    spec_of<E5m2>("e5m2", 5, 2, 15, kIeee, true),
    spec_of<E4m3Fnuz>("e4m3fnuz", 4, 3, 8, kFnuz, true),
    spec_of<E5m2Fnuz>("e5m2fnuz", 5, 2, 16, kFnuz, true),
};

// The value of `bits` by the format's definition (NaN where it is one).
double reference(const Spec& f, unsigned bits) {
  const int width = 1 + f.exponent_bits + f.mantissa_bits;
  const unsigned top = (1u << f.exponent_bits) - 1, mask = (1u << f.mantissa_bits) - 1;
  const bool negative = (bits >> (width - 1)) & 1u;
  const unsigned exponent = (bits >> f.mantissa_bits) & top, mantissa = bits & mask;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (f.kind == kFnuz && bits == 1u << (width - 1)) return nan;
  if (f.kind == kIeee && exponent == top)
    return mantissa != 0 ? nan : (negative ? -1 : 1) * std::numeric_limits<double>::infinity();
  if (f.kind == kNanAtTop && exponent == top && mantissa == mask) return nan;
  const double magnitude = exponent == 0 ? std::ldexp(mantissa, 1 - f.bias - f.mantissa_bits)
                                         : std::ldexp(1.0 + std::ldexp(mantissa, -f.mantissa_bits),
                                                      static_cast<int>(exponent) - f.bias);
  return negative ? -magnitude : magnitude;
}

TEST(SmallFloat, EveryBitPatternDecodesToItsValue) {
  for (const Spec& f : kSpecs) {
    const unsigned patterns = 1u << (1 + f.exponent_bits + f.mantissa_bits);
    for (unsigned bits = 0; bits < patterns; ++bits) {
      const double want = reference(f, bits);
      const float got = f.decode(bits);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << f.name << " " << std::hex << bits;
      } else {
        EXPECT_EQ(static_cast<double>(got), want) << f.name << " " << std::hex << bits;
        EXPECT_EQ(std::signbit(got), std::signbit(want)) << f.name << " " << std::hex << bits;
      }
    }
  }
}

TEST(SmallFloat, ValuesRoundToTheNearerNeighbourAndTiesToEven) {
  for (const Spec& f : kSpecs) {
    // Every finite non-negative value and its bits, in order.
    std::map<double, unsigned> values;
    const unsigned sign = 1u << (f.exponent_bits + f.mantissa_bits);
    for (unsigned bits = 0; bits < sign; ++bits) {
      const double v = reference(f, bits);
      if (std::isfinite(v)) values.emplace(v, bits);
    }
    for (auto it = values.begin(); std::next(it) != values.end(); ++it) {
      const auto [a, a_bits] = *it;
      const auto [b, b_bits] = *std::next(it);
      const auto mid = static_cast<float>((a + b) / 2);  // exact: float has the bits to spare
      ASSERT_EQ(static_cast<double>(mid), (a + b) / 2) << f.name;
      const unsigned even = (a_bits & 1u) == 0 ? a_bits : b_bits;
      EXPECT_EQ(f.encode(static_cast<float>(a)), a_bits) << f.name << " " << a;
      EXPECT_EQ(f.encode(mid), even) << f.name << " tie " << mid;
      EXPECT_EQ(f.encode(std::nextafter(mid, 0.0f)), a_bits) << f.name << " below " << mid;
      EXPECT_EQ(f.encode(std::nextafter(mid, INFINITY)), b_bits) << f.name << " above " << mid;
      // Negative values mirror positive ones, but FNUZ has no negative zero.
      const unsigned negative_a = f.kind == kFnuz && a == 0 ? 0 : sign | a_bits;
      EXPECT_EQ(f.encode(-std::nextafter(mid, 0.0f)), negative_a) << f.name << " -" << mid;
      EXPECT_EQ(f.encode(-std::nextafter(mid, INFINITY)), sign | b_bits) << f.name << " -" << mid;
    }
    // Past the largest finite value, up to infinity.
    const auto [largest, largest_bits] = *values.rbegin();
    const unsigned infinity = ((1u << f.exponent_bits) - 1) << f.mantissa_bits;
    const unsigned past = f.saturates ? largest_bits : infinity;
    EXPECT_EQ(f.encode(static_cast<float>(largest * 2)), past) << f.name;
    EXPECT_EQ(f.encode(INFINITY), past) << f.name;
    EXPECT_EQ(f.encode(-INFINITY), sign | past) << f.name;
    EXPECT_EQ(f.encode(std::numeric_limits<float>::max()), past) << f.name;
    EXPECT_EQ(f.encode(std::nextafter(static_cast<float>(largest), INFINITY)), largest_bits)
        << f.name;
    // NaN stays NaN.
    EXPECT_TRUE(std::isnan(f.decode(f.encode(NAN)))) << f.name;
    EXPECT_TRUE(std::isnan(f.decode(f.encode(-NAN)))) << f.name;
  }
}

TEST(SmallFloat, FnuzFormatsHaveOneNanAndNoNegativeZero) {
  EXPECT_EQ(E4m3Fnuz::encode(1.0f), 0x40u);  // bias 8
  EXPECT_EQ(E4m3Fnuz::encode(240.0f), 0x7fu);
  EXPECT_EQ(E4m3Fnuz::encode(1000.0f), 0x7fu);
  EXPECT_EQ(E4m3Fnuz::encode(-240.0f), 0xffu);
  EXPECT_EQ(E4m3Fnuz::encode(-0.0f), 0x00u);
  EXPECT_EQ(E4m3Fnuz::encode(NAN), 0x80u);
  EXPECT_EQ(E4m3Fnuz::encode(-NAN), 0x80u);
  EXPECT_EQ(E4m3Fnuz::encode(std::ldexp(1.0f, -10)), 0x01u);  // smallest subnormal
  EXPECT_EQ(E5m2Fnuz::encode(1.0f), 0x40u);                   // bias 16
  EXPECT_EQ(E5m2Fnuz::encode(57344.0f), 0x7fu);
  EXPECT_EQ(E5m2Fnuz::encode(-std::ldexp(1.0f, -20)), 0x00u);  // rounds to zero, unsigned
  EXPECT_TRUE(std::isnan(E5m2Fnuz::decode(0x80)));
  EXPECT_EQ(E4m3::encode(1.0f), 0x38u);  // the OCP formats beside them
  EXPECT_EQ(E5m2::encode(1.0f), 0x3cu);
}

}  // namespace
}  // namespace iris::nccl::small_float
