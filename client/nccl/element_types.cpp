// The element types' sizes and names, the small float formats, and the host's reduction loop.
#include "client/nccl/element_types.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace iris::nccl {

namespace {

// A binary float format narrower than float: exponent and mantissa widths and bias; `ieee`
// formats keep their top exponent for infinities and NaN, fp8 e4m3 keeps only S.1111.111 for
// NaN; `saturate` rounds overflow to the largest finite value instead of infinity.
struct SmallFloat {
  int exponent_bits;
  int mantissa_bits;
  int bias;
  bool ieee;
  bool saturate;
  uint32_t nan_bits;
};
constexpr SmallFloat kHalf{5, 10, 15, true, false, 0x7e00};
constexpr SmallFloat kBfloat16{8, 7, 127, true, false, 0x7fc0};
constexpr SmallFloat kE4m3{4, 3, 7, false, true, 0x7f};
constexpr SmallFloat kE5m2{5, 2, 15, true, true, 0x7e};

double largest_finite(const SmallFloat& f) {
  const int top = (1 << f.exponent_bits) - 1;
  const double mantissa_steps = std::ldexp(1.0, f.mantissa_bits);
  if (f.ieee) return (2.0 - 1.0 / mantissa_steps) * std::ldexp(1.0, top - 1 - f.bias);
  return (1.0 + (mantissa_steps - 2.0) / mantissa_steps) * std::ldexp(1.0, top - f.bias);
}

double decode(uint32_t bits, const SmallFloat& f) {
  const int width = 1 + f.exponent_bits + f.mantissa_bits;
  const bool negative = (bits >> (width - 1)) & 1u;
  const uint32_t exponent = (bits >> f.mantissa_bits) & ((1u << f.exponent_bits) - 1);
  const uint32_t mantissa = bits & ((1u << f.mantissa_bits) - 1);
  const uint32_t top = (1u << f.exponent_bits) - 1;
  double magnitude;
  if (f.ieee && exponent == top)
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::quiet_NaN();
  else if (!f.ieee && exponent == top && mantissa == (1u << f.mantissa_bits) - 1)
    magnitude = std::numeric_limits<double>::quiet_NaN();
  else if (exponent == 0)
    magnitude = std::ldexp(static_cast<double>(mantissa), 1 - f.bias - f.mantissa_bits);
  else
    magnitude = std::ldexp(1.0 + std::ldexp(static_cast<double>(mantissa), -f.mantissa_bits),
                           static_cast<int>(exponent) - f.bias);
  return negative ? -magnitude : magnitude;
}

// Rounds to nearest, ties to even (the magnitude scaled to whole quanta is exact in double).
uint32_t encode(double value, const SmallFloat& f) {
  const int width = 1 + f.exponent_bits + f.mantissa_bits;
  const uint32_t sign = std::signbit(value) ? 1u << (width - 1) : 0u;
  if (std::isnan(value)) return sign | f.nan_bits;
  const uint32_t top = (1u << f.exponent_bits) - 1;
  const uint32_t infinity = sign | (top << f.mantissa_bits);
  const double largest = largest_finite(f);
  double magnitude = std::fabs(value);
  const int min_exponent = 1 - f.bias;
  if (std::isinf(magnitude) && !f.saturate) return infinity;
  magnitude = std::min(magnitude, largest * 2);  // past any rounding boundary, still finite
  int exponent = min_exponent;
  if (magnitude >= std::ldexp(1.0, min_exponent)) {
    std::frexp(magnitude, &exponent);
    exponent -= 1;
  }
  const double quantum = std::ldexp(1.0, exponent - f.mantissa_bits);
  const double rounded = std::nearbyint(magnitude / quantum) * quantum;
  if (rounded > largest) return f.saturate ? sign | encode(largest, f) : infinity;
  if (rounded == 0) return sign;
  if (rounded < std::ldexp(1.0, min_exponent))
    return sign | static_cast<uint32_t>(std::ldexp(rounded, f.mantissa_bits - min_exponent));
  int e = 0;
  const double fraction = std::frexp(rounded, &e);  // rounded = fraction * 2^e, fraction in [.5,1)
  const auto mantissa = static_cast<uint32_t>(std::ldexp(fraction * 2.0 - 1.0, f.mantissa_bits));
  return sign | (static_cast<uint32_t>(e - 1 + f.bias) << f.mantissa_bits) | mantissa;
}

// Integers compute unsigned (wrapping), floats as themselves.
template <typename T, bool = std::is_integral_v<T>>
struct ComputeOf {
  using type = T;
};
template <typename T>
struct ComputeOf<T, true> {
  using type = std::make_unsigned_t<T>;
};

// How an element is loaded into the type reductions compute in, and stored back.
template <typename Stored>
struct Native {
  using Compute = typename ComputeOf<Stored>::type;
  static Compute load(const void* base, std::size_t i) {
    Stored v;
    std::memcpy(&v, static_cast<const char*>(base) + i * sizeof(Stored), sizeof v);
    return static_cast<Compute>(v);
  }
  static void store(void* base, std::size_t i, Compute v) {
    const auto s = static_cast<Stored>(v);
    std::memcpy(static_cast<char*>(base) + i * sizeof(Stored), &s, sizeof s);
  }
  // Ordering compares the stored (signed) values.
  static bool less(Compute a, Compute b) { return static_cast<Stored>(a) < static_cast<Stored>(b); }
  static Compute divide(Compute a, uint32_t n) {
    if constexpr (std::is_integral_v<Stored>)
      return static_cast<Compute>(static_cast<Stored>(a) / static_cast<Stored>(n));
    else
      return a / static_cast<Compute>(n);
  }
};

template <typename Bits, const SmallFloat& kFormat>
struct Narrow {
  using Compute = float;
  static Compute load(const void* base, std::size_t i) {
    Bits v;
    std::memcpy(&v, static_cast<const char*>(base) + i * sizeof(Bits), sizeof v);
    return static_cast<float>(decode(v, kFormat));
  }
  static void store(void* base, std::size_t i, Compute v) {
    const auto s = static_cast<Bits>(encode(v, kFormat));
    std::memcpy(static_cast<char*>(base) + i * sizeof(Bits), &s, sizeof s);
  }
  static bool less(Compute a, Compute b) { return a < b; }
  static Compute divide(Compute a, uint32_t n) { return a / static_cast<float>(n); }
};

template <typename Codec>
typename Codec::Compute combine(ReduceKind kind, typename Codec::Compute acc,
                                typename Codec::Compute x) {
  switch (kind) {
    case ReduceKind::kProd:
      return acc * x;
    case ReduceKind::kMax:
      return Codec::less(acc, x) ? x : acc;
    case ReduceKind::kMin:
      return Codec::less(x, acc) ? x : acc;
    default:  // sum, avg, and the pre-multiplied sum (x already scaled)
      return acc + x;
  }
}

template <typename Codec>
void reduce_blocks(const Reduction& r, const void* src, std::size_t blocks, std::size_t stride,
                   std::size_t count, void* dst) {
  using Compute = typename Codec::Compute;
  Compute scalar{};
  if (r.kind == ReduceKind::kPreMulSum)
    scalar = Codec::load(r.scalar_at != nullptr ? r.scalar_at : &r.scalar_bits, 0);
  const auto* base = static_cast<const char*>(src);
  for (std::size_t i = 0; i < count; ++i) {
    Compute acc = Codec::load(base, i);
    if (r.kind == ReduceKind::kPreMulSum) acc = acc * scalar;
    for (std::size_t b = 1; b < blocks; ++b) {
      Compute x = Codec::load(base + b * stride, i);
      if (r.kind == ReduceKind::kPreMulSum) x = x * scalar;
      acc = combine<Codec>(r.kind, acc, x);
    }
    if (r.kind == ReduceKind::kAvg) acc = Codec::divide(acc, static_cast<uint32_t>(blocks));
    Codec::store(dst, i, acc);
  }
}

struct TypeInfo {
  const char* name;
  std::size_t bytes;
  void (*reduce)(const Reduction&, const void*, std::size_t, std::size_t, std::size_t, void*);
};

// By ncclDataType_t value.
constexpr TypeInfo kTypes[kElementTypeCount] = {
    {"int8", 1, reduce_blocks<Native<int8_t>>},
    {"uint8", 1, reduce_blocks<Native<uint8_t>>},
    {"int32", 4, reduce_blocks<Native<int32_t>>},
    {"uint32", 4, reduce_blocks<Native<uint32_t>>},
    {"int64", 8, reduce_blocks<Native<int64_t>>},
    {"uint64", 8, reduce_blocks<Native<uint64_t>>},
    {"float16", 2, reduce_blocks<Narrow<uint16_t, kHalf>>},
    {"float32", 4, reduce_blocks<Native<float>>},
    {"float64", 8, reduce_blocks<Native<double>>},
    {"bfloat16", 2, reduce_blocks<Narrow<uint16_t, kBfloat16>>},
    {"float8e4m3", 1, reduce_blocks<Narrow<uint8_t, kE4m3>>},
    {"float8e5m2", 1, reduce_blocks<Narrow<uint8_t, kE5m2>>},
};

const TypeInfo& info(ElementType type) { return kTypes[static_cast<int>(type)]; }

}  // namespace

std::optional<ElementType> element_type(int value) {
  if (value < 0 || value >= kElementTypeCount) return std::nullopt;
  return static_cast<ElementType>(value);
}

std::size_t element_bytes(ElementType type) { return info(type).bytes; }
const char* element_name(ElementType type) { return info(type).name; }

const char* reduce_name(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kSum:
      return "sum";
    case ReduceKind::kProd:
      return "prod";
    case ReduceKind::kMax:
      return "max";
    case ReduceKind::kMin:
      return "min";
    case ReduceKind::kAvg:
      return "avg";
    case ReduceKind::kPreMulSum:
      return "premulsum";
  }
  return "?";
}

void reduce_on_host(ElementType type, const Reduction& reduction, const void* src,
                    std::size_t blocks, std::size_t stride_bytes, std::size_t count, void* dst) {
  info(type).reduce(reduction, src, blocks, stride_bytes, count, dst);
}

float half_to_float(uint16_t bits) { return static_cast<float>(decode(bits, kHalf)); }
uint16_t float_to_half(float value) { return static_cast<uint16_t>(encode(value, kHalf)); }
float bfloat16_to_float(uint16_t bits) { return static_cast<float>(decode(bits, kBfloat16)); }
uint16_t float_to_bfloat16(float value) { return static_cast<uint16_t>(encode(value, kBfloat16)); }
float e4m3_to_float(uint8_t bits) { return static_cast<float>(decode(bits, kE4m3)); }
uint8_t float_to_e4m3(float value) { return static_cast<uint8_t>(encode(value, kE4m3)); }
float e5m2_to_float(uint8_t bits) { return static_cast<float>(decode(bits, kE5m2)); }
uint8_t float_to_e5m2(float value) { return static_cast<uint8_t>(encode(value, kE5m2)); }

}  // namespace iris::nccl
