// Scalar IEEE binary16 and bfloat16 conversions, inline so that the scalar and
// the vectorised kernels share one definition of every rounding rule. Both
// round to nearest even; NaN stays a quiet NaN that keeps the top payload bits
// (what the x86 F16C instructions produce, so the scalar and vector paths agree
// bit for bit); finite values beyond the fp16 range become +-inf; subnormal
// halves are produced and consumed exactly.
#pragma once

#include <cstdint>
#include <cstring>

namespace horovodlite {
namespace kernels {
namespace detail {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline uint64_t double_bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof(u));
  return u;
}

inline uint16_t float_to_half_scalar(float f) {
  uint32_t x = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) {  // inf or NaN
    if (x == 0x7f800000u) return sign | 0x7c00u;
    return static_cast<uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
  }
  if (x >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to inf
  if (x >= 0x38800000u) {                       // normal half (>= 2^-14)
    const uint32_t odd = (x >> 13) & 1u;
    x += 0xc8000fffu + odd;  // rebias the exponent by -112, add the rounding bias
    return static_cast<uint16_t>(sign | (x >> 13));
  }
  if (x <= 0x33000000u) return sign;  // <= 2^-25 rounds to (signed) zero
  // Subnormal half: k * 2^-24 with k = m * 2^(e - 126).
  const uint32_t e = x >> 23;
  const uint32_t m = (x & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - e;  // 14..24
  uint32_t k = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1u);
  if (rem > halfway || (rem == halfway && (k & 1u))) ++k;
  return static_cast<uint16_t>(sign | k);
}

inline float half_to_float_scalar(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  if (e == 0x1fu) {
    if (m == 0) return bits_float(sign | 0x7f800000u);
    return bits_float(sign | 0x7fc00000u | (m << 13));  // quiet NaN
  }
  if (e == 0) {
    if (m == 0) return bits_float(sign);
    e = 113;  // normalise the subnormal
    while ((m & 0x400u) == 0) {
      m <<= 1;
      --e;
    }
    m &= 0x3ffu;
    return bits_float(sign | (e << 23) | (m << 13));
  }
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

// Direct double -> half with a single rounding (no double rounding through float).
inline uint16_t double_to_half_scalar(double d) {
  uint64_t x = double_bits(d);
  const uint16_t sign = static_cast<uint16_t>((x >> 48) & 0x8000u);
  x &= 0x7fffffffffffffffull;
  if (x >= 0x7ff0000000000000ull) {
    if (x == 0x7ff0000000000000ull) return sign | 0x7c00u;
    return static_cast<uint16_t>(sign | 0x7e00u | ((x >> 42) & 0x3ffu));
  }
  if (x >= 0x40effe0000000000ull) return sign | 0x7c00u;  // >= 65520
  if (x >= 0x3f10000000000000ull) {                       // >= 2^-14
    const uint64_t odd = (x >> 42) & 1u;
    x -= 1008ull << 52;  // rebias the exponent
    x += ((1ull << 41) - 1u) + odd;
    return static_cast<uint16_t>(sign | (x >> 42));
  }
  if (x <= 0x3e60000000000000ull) return sign;  // <= 2^-25
  const uint64_t e = x >> 52;
  const uint64_t m = (x & ((1ull << 52) - 1u)) | (1ull << 52);
  const uint64_t shift = 1051u - e;  // 43..53
  uint64_t k = m >> shift;
  const uint64_t rem = m & ((1ull << shift) - 1u);
  const uint64_t halfway = 1ull << (shift - 1u);
  if (rem > halfway || (rem == halfway && (k & 1u))) ++k;
  return static_cast<uint16_t>(sign | k);
}

inline uint16_t float_to_bfloat16_scalar(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  const uint32_t odd = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7fffu + odd) >> 16);
}

inline float bfloat16_to_float_scalar(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

// Direct double -> bfloat16 with a single rounding: to float rounded to odd
// (exact values stay exact; an inexact one gets its last bit set, which keeps
// the sticky information), then to nearest even, as the half conversion does.
inline uint16_t double_to_bfloat16_scalar(double d) {
  const float f = static_cast<float>(d);
  if (d != d || static_cast<double>(f) == d) return float_to_bfloat16_scalar(f);
  uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) == 0x7f800000u || (f < 0 ? f < d : f > d)) --x;  // rounded away from zero: one ulp back
  return float_to_bfloat16_scalar(bits_float(x | 1u));
}

}  // namespace detail

// The factor a float16 (bfloat16) tensor is scaled by on a GPU (prescale,
// postscale, Average's 1/size), as Horovod's CUDA kernels do: the factor is
// rounded to the tensor's type first (__float2half((float)f)), then each element
// is multiplied in that type (__hmul: the exact product rounded once). The
// product of two 11-bit (8-bit) significands is exact in float32, so float math
// with this factor and one rounding to the tensor's type gives Horovod's bits.
// (The host kernels scale by the float32 factor, as Horovod's CPU path does.)
inline float device_half_factor(double factor) {
  return detail::half_to_float_scalar(detail::float_to_half_scalar(static_cast<float>(factor)));
}
inline float device_bfloat16_factor(double factor) {
  return detail::bfloat16_to_float_scalar(detail::float_to_bfloat16_scalar(static_cast<float>(factor)));
}

}  // namespace kernels
}  // namespace horovodlite
