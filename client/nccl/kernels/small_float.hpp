// The floats narrower than float that NCCL's datatypes name (float16, bfloat16, the two fp8s, and
// the fp8 variants RCCL uses on MI300-series GPUs), decoded to float and encoded from it with
// integer operations only. One text for every place a reduction runs: the host (element_types.cpp),
// nvcc's kernels and the HIP kernels hiprtc compiles at run time, which has no standard library;
// so plain integer types, no <cmath>, and every function usable on host and device.
//
// Encoding rounds to nearest, ties to even, once. Formats with infinities (IEEE: float16,
// bfloat16, fp8 e5m2) overflow to infinity unless they saturate (fp8 e5m2 does, as CUDA's
// conversions to fp8 do); formats without them (fp8 e4m3, the FNUZ variants) saturate to their
// largest finite value. NaN keeps its sign where the format has signed NaNs; FNUZ formats have
// one NaN (0x80) and no negative zero.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(__HIPCC_RTC__)
#define IRIS_HOST_DEVICE __host__ __device__
#else
#define IRIS_HOST_DEVICE
#endif

namespace iris::nccl::small_float {

// What a format keeps at its top exponent: IEEE's infinities and NaNs; OCP fp8 e4m3's single NaN
// mantissa (S.1111.111), the rest finite; FNUZ's nothing (its one NaN is the negative zero).
enum Specials : int { kIeee = 0, kNanAtTop = 1, kFnuz = 2 };

IRIS_HOST_DEVICE inline unsigned bits_of(float v) {
  unsigned u;
  __builtin_memcpy(&u, &v, sizeof u);
  return u;
}

IRIS_HOST_DEVICE inline float float_of(unsigned u) {
  float v;
  __builtin_memcpy(&v, &u, sizeof v);
  return v;
}

template <int ExponentBits, int MantissaBits, int Bias, int Kind, bool SaturateIeee>
struct Format {
  static constexpr int kSignShift = ExponentBits + MantissaBits;
  static constexpr unsigned kMantissaMask = (1u << MantissaBits) - 1;
  static constexpr unsigned kTop = (1u << ExponentBits) - 1;
  static constexpr int kMinExponent = 1 - Bias;  // of the normal numbers
  // The largest finite value's biased exponent and mantissa.
  static constexpr unsigned kMaxExponent = Kind == kIeee ? kTop - 1 : kTop;
  static constexpr unsigned kMaxMantissa = Kind == kNanAtTop ? kMantissaMask - 1 : kMantissaMask;
  static constexpr bool kSaturates = Kind != kIeee || SaturateIeee;

  IRIS_HOST_DEVICE static float decode(unsigned bits) {
    const unsigned sign = (bits >> kSignShift) & 1u;
    const unsigned exponent = (bits >> MantissaBits) & kTop;
    unsigned mantissa = bits & kMantissaMask;
    if (ExponentBits == 8) return float_of(bits << (23 - MantissaBits));  // float's own exponent
    const unsigned float_sign = sign << 31;
    if ((Kind == kFnuz && bits == (1u << kSignShift)) ||
        (Kind == kIeee && exponent == kTop && mantissa != 0) ||
        (Kind == kNanAtTop && exponent == kTop && mantissa == kMantissaMask))
      return float_of(float_sign | 0x7fc00000u);
    if (Kind == kIeee && exponent == kTop) return float_of(float_sign | 0x7f800000u);
    int e = static_cast<int>(exponent) - Bias;
    if (exponent == 0) {
      if (mantissa == 0) return float_of(float_sign);
      e = kMinExponent;
      while ((mantissa & (1u << MantissaBits)) == 0) {  // normalise: float holds it as normal
        mantissa <<= 1;
        --e;
      }
      mantissa &= kMantissaMask;
    }
    return float_of(float_sign | (static_cast<unsigned>(e + 127) << 23) |
                    (mantissa << (23 - MantissaBits)));
  }

  IRIS_HOST_DEVICE static unsigned encode(float value) {
    const unsigned x = bits_of(value);
    const unsigned sign = (x >> 31) << kSignShift;
    const unsigned magnitude = x & 0x7fffffffu;
    const unsigned largest = sign | (kMaxExponent << MantissaBits) | kMaxMantissa;
    if (magnitude > 0x7f800000u) {  // NaN
      if (Kind == kFnuz) return 1u << kSignShift;
      return sign | (kTop << MantissaBits) |
             (Kind == kIeee ? 1u << (MantissaBits - 1) : kMantissaMask);
    }
    if (magnitude == 0x7f800000u) return kSaturates ? largest : sign | (kTop << MantissaBits);
    // value = significand * 2^(exponent - 150); a float subnormal counts in the lowest binade.
    int exponent = static_cast<int>(magnitude >> 23);
    unsigned significand = magnitude & 0x7fffffu;
    if (exponent != 0)
      significand |= 0x800000u;
    else
      exponent = 1;
    exponent -= 127;
    // Quanta of 2^(e - MantissaBits), e the value's binade or the format's lowest normal one.
    int e = exponent > kMinExponent ? exponent : kMinExponent;
    const int shift = e - exponent + 23 - MantissaBits;  // at least 23 - MantissaBits > 0
    unsigned quanta = 0;
    if (shift < 31) {  // from 25 on, below half a quantum: zero
      quanta = significand >> shift;
      const unsigned rest = significand & ((1u << shift) - 1);
      const unsigned half = 1u << (shift - 1);
      if (rest > half || (rest == half && (quanta & 1u) != 0)) ++quanta;
    }
    if (quanta >= (2u << MantissaBits)) {  // rounding carried into the next binade
      quanta >>= 1;
      ++e;
    }
    if (quanta == 0) return Kind == kFnuz ? 0u : sign;
    unsigned biased = 0, mantissa = quanta;  // a subnormal unless the leading bit is set
    if (quanta >= (1u << MantissaBits)) {
      biased = static_cast<unsigned>(e - kMinExponent + 1);
      mantissa = quanta & kMantissaMask;
    }
    if (biased > kMaxExponent || (biased == kMaxExponent && mantissa > kMaxMantissa))
      return kSaturates ? largest : sign | (kTop << MantissaBits);
    return sign | (biased << MantissaBits) | mantissa;
  }
};

using Half = Format<5, 10, 15, kIeee, false>;
using Bfloat16 = Format<8, 7, 127, kIeee, false>;
using E4m3 = Format<4, 3, 7, kNanAtTop, true>;
using E5m2 = Format<5, 2, 15, kIeee, true>;
using E4m3Fnuz = Format<4, 3, 8, kFnuz, true>;
using E5m2Fnuz = Format<5, 2, 16, kFnuz, true>;

}  // namespace iris::nccl::small_float
