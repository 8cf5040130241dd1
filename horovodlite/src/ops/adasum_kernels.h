// Adasum's element kernels (adasum.h describes the algorithm): per dtype, the
// partial dot products and squared norms of two pieces, and their combination,
// both in a wider accumulator and rounded once. Internal to ops/adasum.cc;
// float32, float16 and bfloat16 have AVX2/FMA forms in adasum_kernels.cc.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "horovodlite/common.h"
#include "kernels/half.h"

namespace horovodlite {

// Whether Adasum reduces this dtype (float16, bfloat16, float32, float64).
inline bool adasum_dtype(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 || dtype == DataType::kFloat32 ||
         dtype == DataType::kFloat64;
}
inline bool is_power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

namespace adasum_kernels {

// The scalars (dot products, squared norms, coefficients) are long double: on
// x86-64 and AArch64 its exponent reaches 2^16383, so the squares of float64's
// extremes stay normal. Float64 elements are accumulated in it too; narrower
// dtypes in double, which holds their squares exactly enough and is faster.
using Scalar = long double;
using Wide64 = std::conditional_t<(LDBL_MAX_EXP >= 4 * DBL_MAX_EXP), long double, double>;

// ---- element access per dtype: widen to the accumulator, round back once ----

struct F32 {
  using T = float;
  using Acc = double;
  static Acc load(T x) { return x; }
  static T store(Acc v) { return static_cast<T>(v); }
};
struct F64 {
  using T = double;
  using Acc = Wide64;
  static Acc load(T x) { return x; }
  static T store(Acc v) { return static_cast<T>(v); }
};
struct F16 {
  using T = uint16_t;
  using Acc = double;
  static Acc load(T x) { return kernels::detail::half_to_float_scalar(x); }
  static T store(Acc v) { return kernels::detail::double_to_half_scalar(v); }
};
struct BF16 {
  using T = uint16_t;
  using Acc = double;
  static Acc load(T x) { return kernels::detail::bfloat16_to_float_scalar(x); }
  // double -> float rounding to odd, then float -> bfloat16 to nearest even:
  // the same as one rounding of the double (no double-rounding error).
  static T store(Acc v) {
    float f = static_cast<float>(v);
    if (std::isfinite(f) && static_cast<double>(f) != v) {
      uint32_t u = kernels::detail::float_bits(f);
      if (std::fabs(static_cast<double>(f)) > std::fabs(v)) u -= 1;  // back toward zero
      f = kernels::detail::bits_float(u | 1u);
    }
    return kernels::detail::float_to_bfloat16_scalar(f);
  }
};

// out += (x.y, x.x, y.y) over n elements; four independent accumulators per
// quantity, so the additions do not wait on one another.
template <typename E>
void dots_generic(const typename E::T* x, const typename E::T* y, int64_t n, Scalar out[3]) {
  using Acc = typename E::Acc;
  Acc d[4] = {}, xx[4] = {}, yy[4] = {};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int k = 0; k < 4; ++k) {
      const Acc a = E::load(x[i + k]), b = E::load(y[i + k]);
      d[k] += a * b;
      xx[k] += a * a;
      yy[k] += b * b;
    }
  }
  for (; i < n; ++i) {
    const Acc a = E::load(x[i]), b = E::load(y[i]);
    d[0] += a * b;
    xx[0] += a * a;
    yy[0] += b * b;
  }
  out[0] += static_cast<Scalar>((d[0] + d[1]) + (d[2] + d[3]));
  out[1] += static_cast<Scalar>((xx[0] + xx[1]) + (xx[2] + xx[3]));
  out[2] += static_cast<Scalar>((yy[0] + yy[1]) + (yy[2] + yy[3]));
}

// out[i] = cx * x[i] + cy * y[i], computed in the accumulator's width (out may be x).
template <typename E>
void combine_generic(typename E::T* out, const typename E::T* x, const typename E::T* y, int64_t n, Scalar cx,
                     Scalar cy) {
  using Acc = typename E::Acc;
  const Acc ax = static_cast<Acc>(cx), ay = static_cast<Acc>(cy);
  for (int64_t i = 0; i < n; ++i) out[i] = E::store(ax * E::load(x[i]) + ay * E::load(y[i]));
}

// float16 and bfloat16 (bfloat16: true): AVX2/FMA/F16C forms where the CPU has
// them (adasum_kernels.cc: the combination as one multiply-add in double, then
// rounded once as E::store), returning false where it has not. Whether they run
// here: half_kernels_vectorized() (for tests).
bool dots_16bit(bool bfloat16, const uint16_t* x, const uint16_t* y, int64_t n, Scalar out[3]);
bool combine_16bit(bool bfloat16, uint16_t* out, const uint16_t* x, const uint16_t* y, int64_t n, Scalar cx, Scalar cy);
bool half_kernels_vectorized();

// The kernels per dtype (float32 has an AVX2 form below; float16 and bfloat16
// the forms above).
template <typename E>
void dots(const typename E::T* x, const typename E::T* y, int64_t n, Scalar out[3]) {
  if constexpr (std::is_same_v<E, F16> || std::is_same_v<E, BF16>) {
    if (dots_16bit(std::is_same_v<E, BF16>, x, y, n, out)) return;
  }
  dots_generic<E>(x, y, n, out);
}
// stream: non-temporal stores where the dtype has a kernel with them (float32
// on x86-64; the others store normally), for a send slot (stream_copy).
template <typename E>
void combine(typename E::T* out, const typename E::T* x, const typename E::T* y, int64_t n, Scalar cx, Scalar cy,
             bool /*stream*/ = false) {
  if constexpr (std::is_same_v<E, F16> || std::is_same_v<E, BF16>) {
    if (combine_16bit(std::is_same_v<E, BF16>, out, x, y, n, cx, cy)) return;
  }
  combine_generic<E>(out, x, y, n, cx, cy);
}

// memcpy with non-temporal (streaming) stores on x86-64, that leave no copy
// of dst in this core's caches: for a send slot that a peer's core reads next
// while an earlier copy of its lines still sits in that core's cache, which a
// normal store must first fetch back (adasum_exchange.h, SlotStores). Plain
// memcpy elsewhere.
void stream_copy(void* dst, const void* src, size_t bytes);

// ---- AVX2/FMA for float32 (the common case), float16 and bfloat16: four
// doubles per instruction ----

// float32: AVX2/FMA where the CPU has it (adasum_kernels.cc), else the generic
// loops above; the same values up to the last bits of the double sums (they
// add in another order, and multiply-add in one rounding).
void dots_f32(const float* x, const float* y, int64_t n, Scalar out[3]);
void combine_f32(float* out, const float* x, const float* y, int64_t n, Scalar cx, Scalar cy, bool stream);
template <>
inline void dots<F32>(const float* x, const float* y, int64_t n, Scalar out[3]) {
  dots_f32(x, y, n, out);
}
template <>
inline void combine<F32>(float* out, const float* x, const float* y, int64_t n, Scalar cx, Scalar cy, bool stream) {
  combine_f32(out, x, y, n, cx, cy, stream);
}

template <typename F>
void dispatch(DataType dtype, F f) {
  switch (dtype) {
    case DataType::kFloat32:
      f(F32{});
      break;
    case DataType::kFloat64:
      f(F64{});
      break;
    case DataType::kFloat16:
      f(F16{});
      break;
    default:  // kBFloat16 (run() checks the dtype first)
      f(BF16{});
      break;
  }
}

}  // namespace adasum_kernels
}  // namespace horovodlite
