// AVX2/F16C kernels. Everything here is compiled for AVX2 through a target
// pragma and has internal linkage (so that no AVX2 copy of an inline function
// can be picked by the linker for the portable path); only the avx2_* entry
// points of reduce_impl.h are visible, and reduce.cc calls them only after
// checking the CPU. Odd tails are finished by the scalar kernels, which apply
// the same operation element by element, so the results are bit-identical.
#include "kernels/reduce_impl.h"

#if HVL_KERNELS_X86

#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "kernels/avx2_16bit.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
#endif

namespace horovodlite {
namespace kernels {
namespace detail {
namespace {

// 32-byte GCC vector types (element-wise operators, lane-wise ?: ) and the
// unsigned type used for wrapping integer arithmetic.
template <class T>
struct Vec;
#define HVL_VEC(T, U)                                               \
  template <>                                                       \
  struct Vec<T> {                                                   \
    typedef T type __attribute__((vector_size(32)));                \
    typedef U utype __attribute__((vector_size(32)));               \
    static constexpr int kLanes = static_cast<int>(32 / sizeof(T)); \
  };
HVL_VEC(uint8_t, uint8_t)
HVL_VEC(int8_t, uint8_t)
HVL_VEC(int16_t, uint16_t)
HVL_VEC(int32_t, uint32_t)
HVL_VEC(int64_t, uint64_t)
HVL_VEC(float, float)
HVL_VEC(double, double)
#undef HVL_VEC

template <class V>
inline V load(const void* p) {
  V v;
  __builtin_memcpy(&v, p, sizeof(V));
  return v;
}

template <class V>
inline void store(void* p, V v) {
  __builtin_memcpy(p, &v, sizeof(V));
}

// Vector ops, lane for lane the same as the scalar ones in reduce.cc.
template <class T>
struct SumOp {
  template <class V>
  static V apply(V d, V s) {
    using U = typename Vec<T>::utype;
    return (V)((U)d + (U)s);
  }
};
template <class T>
struct ProductOp {
  template <class V>
  static V apply(V d, V s) {
    using U = typename Vec<T>::utype;
    return (V)((U)d * (U)s);
  }
};
// Floats propagate a NaN from either side; integers compile to vpmin/vpmax.
template <class T>
struct MinOp {
  template <class V>
  static V apply(V d, V s) {
    if constexpr (std::is_floating_point_v<T>) {
      return ((s < d) | (s != s)) ? s : d;
    } else {
      return s < d ? s : d;
    }
  }
};
template <class T>
struct MaxOp {
  template <class V>
  static V apply(V d, V s) {
    if constexpr (std::is_floating_point_v<T>) {
      return ((s > d) | (s != s)) ? s : d;
    } else {
      return s > d ? s : d;
    }
  }
};
// bool as bytes: or = min(d | s, 1); and = min(min(d, s), 1).
struct OrOp {
  template <class V>
  static V apply(V d, V s) {
    V r = d | s;
    const V one = V{} + 1;
    return r < one ? r : one;
  }
};
struct AndOp {
  template <class V>
  static V apply(V d, V s) {
    V r = s < d ? s : d;
    const V one = V{} + 1;
    return r < one ? r : one;
  }
};

// d = a (op) s, element-wise; d may be a.
template <class T, class Op>
void reduce_vec(void* dst, const void* src_a, const void* src, int64_t n, DataType dtype, ReduceOp op) {
  using V = typename Vec<T>::type;
  constexpr int64_t L = Vec<T>::kLanes;
  T* d = static_cast<T*>(dst);
  const T* a = static_cast<const T*>(src_a);
  const T* s = static_cast<const T*>(src);
  int64_t i = 0;
  for (; i + 4 * L <= n; i += 4 * L) {
    V d0 = load<V>(a + i), d1 = load<V>(a + i + L), d2 = load<V>(a + i + 2 * L), d3 = load<V>(a + i + 3 * L);
    V s0 = load<V>(s + i), s1 = load<V>(s + i + L), s2 = load<V>(s + i + 2 * L), s3 = load<V>(s + i + 3 * L);
    store(d + i, Op::apply(d0, s0));
    store(d + i + L, Op::apply(d1, s1));
    store(d + i + 2 * L, Op::apply(d2, s2));
    store(d + i + 3 * L, Op::apply(d3, s3));
  }
  for (; i + L <= n; i += L) store(d + i, Op::apply(load<V>(a + i), load<V>(s + i)));
  if (i < n) scalar_reduce(d + i, a + i, s + i, n - i, dtype, op);
}

template <class T>
void reduce_dispatch(void* dst, const void* a, const void* src, int64_t n, DataType dtype, ReduceOp op) {
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum:
      return reduce_vec<T, SumOp<T>>(dst, a, src, n, dtype, op);
    case ReduceOp::kMin:
      return reduce_vec<T, MinOp<T>>(dst, a, src, n, dtype, op);
    case ReduceOp::kMax:
      return reduce_vec<T, MaxOp<T>>(dst, a, src, n, dtype, op);
    case ReduceOp::kProduct:
      return reduce_vec<T, ProductOp<T>>(dst, a, src, n, dtype, op);
    default:
      return;
  }
}

// ---- 16-bit floats: 8 lanes widened to float (kernels/avx2_16bit.h) ----

// bf16 reduction, 16 lanes per iteration without shuffles: the even elements
// of a 32-bit pair become floats by shifting left, the odd ones by masking;
// results are rounded to nearest even and merged back with a word blend.
// No NaN fix-up is needed here (unlike bf8_store): the inputs are widened
// bf16 values, so any NaN the op produces (an input NaN, quieted, or the
// default NaN) has zero low 16 bits, which the rounding add leaves alone.
template <class Op>
void reduce_bf16_vec(void* dst, const void* src_a, const void* src, int64_t n, DataType dtype, ReduceOp op) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* a = static_cast<const uint16_t*>(src_a);
  const uint16_t* s = static_cast<const uint16_t*>(src);
  const __m256i high_mask = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  const __m256i bias = _mm256_set1_epi32(0x7fff);
  const __m256i one = _mm256_set1_epi32(1);
  auto round = [&](__m256 f) {  // result in the high 16 bits of each lane
    const __m256i x = _mm256_castps_si256(f);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
    return _mm256_add_epi32(_mm256_add_epi32(x, bias), odd);
  };
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i dv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i));
    const __m256i sv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256 even =
        Op::apply(_mm256_castsi256_ps(_mm256_slli_epi32(dv, 16)), _mm256_castsi256_ps(_mm256_slli_epi32(sv, 16)));
    const __m256 odd = Op::apply(_mm256_castsi256_ps(_mm256_and_si256(dv, high_mask)),
                                 _mm256_castsi256_ps(_mm256_and_si256(sv, high_mask)));
    const __m256i merged = _mm256_blend_epi16(_mm256_srli_epi32(round(even), 16), round(odd), 0xaa);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), merged);
  }
  if (i < n) scalar_reduce(d + i, a + i, s + i, n - i, dtype, op);
}

template <class Io, class Op>
void reduce_16_vec(void* dst, const void* src_a, const void* src, int64_t n, DataType dtype, ReduceOp op) {
  if constexpr (std::is_same_v<Io, BfIo>) {
    return reduce_bf16_vec<Op>(dst, src_a, src, n, dtype, op);  // 16 lanes without cross-lane shuffles
  }
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* a = static_cast<const uint16_t*>(src_a);
  const uint16_t* s = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256 a0 = Io::load(a + i), a1 = Io::load(a + i + 8), a2 = Io::load(a + i + 16), a3 = Io::load(a + i + 24);
    __m256 b0 = Io::load(s + i), b1 = Io::load(s + i + 8), b2 = Io::load(s + i + 16), b3 = Io::load(s + i + 24);
    Io::store(d + i, Op::apply(a0, b0));
    Io::store(d + i + 8, Op::apply(a1, b1));
    Io::store(d + i + 16, Op::apply(a2, b2));
    Io::store(d + i + 24, Op::apply(a3, b3));
  }
  for (; i + 8 <= n; i += 8) Io::store(d + i, Op::apply(Io::load(a + i), Io::load(s + i)));
  if (i < n) scalar_reduce(d + i, a + i, s + i, n - i, dtype, op);
}

template <class Io>
void reduce_16_dispatch(void* dst, const void* a, const void* src, int64_t n, DataType dtype, ReduceOp op) {
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum:
      return reduce_16_vec<Io, SumOp<float>>(dst, a, src, n, dtype, op);
    case ReduceOp::kMin:
      return reduce_16_vec<Io, MinOp<float>>(dst, a, src, n, dtype, op);
    case ReduceOp::kMax:
      return reduce_16_vec<Io, MaxOp<float>>(dst, a, src, n, dtype, op);
    case ReduceOp::kProduct:
      return reduce_16_vec<Io, ProductOp<float>>(dst, a, src, n, dtype, op);
    default:
      return;
  }
}

// ---- scaling ----

template <class T, class M>
void scale_float_vec(void* dst, const void* src, int64_t n, DataType dtype, M factor) {
  using V = typename Vec<T>::type;
  constexpr int64_t L = Vec<T>::kLanes;
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  V f;
  for (int64_t k = 0; k < L; ++k) f[k] = factor;
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    V s0 = load<V>(s + i), s1 = load<V>(s + i + L);
    store(d + i, s0 * f);
    store(d + i + L, s1 * f);
  }
  for (; i + L <= n; i += L) store(d + i, load<V>(s + i) * f);
  if (i < n) scalar_scale_copy(d + i, s + i, n - i, dtype, factor);
}

template <class Io>
void scale_16_vec(void* dst, const void* src, int64_t n, DataType dtype, double factor) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* s = static_cast<const uint16_t*>(src);
  const __m256 f = _mm256_set1_ps(static_cast<float>(factor));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) Io::store(d + i, _mm256_mul_ps(Io::load(s + i), f));
  if (i < n) scalar_scale_copy(d + i, s + i, n - i, dtype, factor);
}

// int32: product in double, NaN -> 0, saturated, truncated toward zero.
void scale_int32_vec(void* dst, const void* src, int64_t n, double factor) {
  int32_t* d = static_cast<int32_t*>(dst);
  const int32_t* s = static_cast<const int32_t*>(src);
  const __m256d f = _mm256_set1_pd(factor);
  const __m256d lo = _mm256_set1_pd(-2147483648.0);
  const __m256d hi = _mm256_set1_pd(2147483647.0);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    __m256d p = _mm256_mul_pd(_mm256_cvtepi32_pd(x), f);
    p = _mm256_and_pd(p, _mm256_cmp_pd(p, p, _CMP_ORD_Q));
    p = _mm256_max_pd(_mm256_min_pd(p, hi), lo);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm256_cvttpd_epi32(p));
  }
  if (i < n) scalar_scale_copy(d + i, s + i, n - i, DataType::kInt32, factor);
}

// double -> float rounded to odd (truncate, then set the last bit if inexact):
// rounding that to half to nearest even equals rounding the double directly.
inline __m128 pd_to_ps_round_odd(__m256d x) {
  const __m128 f = _mm256_cvtpd_ps(x);
  const __m256d back = _mm256_cvtps_pd(f);
  const __m256d abs_mask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffll));
  const __m256d overshot = _mm256_cmp_pd(_mm256_and_pd(back, abs_mask), _mm256_and_pd(x, abs_mask), _CMP_GT_OQ);
  const __m256d inexact = _mm256_cmp_pd(back, x, _CMP_NEQ_OQ);
  const __m256i low_dwords = _mm256_setr_epi32(0, 2, 4, 6, 0, 0, 0, 0);
  const __m128i over32 = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_castpd_si256(overshot), low_dwords));
  const __m128i inexact32 =
      _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_castpd_si256(inexact), low_dwords));
  __m128i bits = _mm_add_epi32(_mm_castps_si128(f), over32);  // one ulp toward zero where rounded away
  bits = _mm_or_si128(bits, _mm_and_si128(inexact32, _mm_set1_epi32(1)));
  return _mm_castsi128_ps(bits);
}

// ---- 16-bit wire: float/double accumulator, half (Io = HalfIo) or bfloat16
// (Io = BfIo) on the wire ----

// float: 8 lanes per step. Each step reads its 8 wire values before writing its
// 8 outputs, so out == src is fine.
template <class Io, class Op, bool kRound, bool kOut>
void reduce_half_f32(float* d, const float* a, const uint16_t* s, uint16_t* out, int64_t n, int64_t* done) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 r0 = Op::apply(_mm256_loadu_ps(a + i), Io::load(s + i));
    const __m256 r1 = Op::apply(_mm256_loadu_ps(a + i + 8), Io::load(s + i + 8));
    if constexpr (kRound || kOut) {
      const __m128i h0 = Io::pack(r0);
      const __m128i h1 = Io::pack(r1);
      _mm256_storeu_ps(d + i, kRound ? Io::unpack(h0) : r0);
      _mm256_storeu_ps(d + i + 8, kRound ? Io::unpack(h1) : r1);
      if constexpr (kOut) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h0);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i + 8), h1);
      }
    } else {
      _mm256_storeu_ps(d + i, r0);
      _mm256_storeu_ps(d + i + 8, r1);
    }
  }
  *done = i;
}

// double: 8 elements (two 4-lane vectors) per step; double -> half rounds once
// (via float rounded to odd, as in avx2_double_to_half_n).
template <class Op, bool kRound, bool kOut>
void reduce_half_f64(double* d, const double* a, const uint16_t* s, uint16_t* out, int64_t n, int64_t* done) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 w = half8_load(s + i);
    const __m256d r0 = Op::apply(_mm256_loadu_pd(a + i), _mm256_cvtps_pd(_mm256_castps256_ps128(w)));
    const __m256d r1 = Op::apply(_mm256_loadu_pd(a + i + 4), _mm256_cvtps_pd(_mm256_extractf128_ps(w, 1)));
    if constexpr (kRound || kOut) {
      const __m256 f = _mm256_insertf128_ps(_mm256_castps128_ps256(pd_to_ps_round_odd(r0)), pd_to_ps_round_odd(r1), 1);
      const __m128i h = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      if constexpr (kRound) {
        const __m256 back = _mm256_cvtph_ps(h);
        _mm256_storeu_pd(d + i, _mm256_cvtps_pd(_mm256_castps256_ps128(back)));
        _mm256_storeu_pd(d + i + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(back, 1)));
      } else {
        _mm256_storeu_pd(d + i, r0);
        _mm256_storeu_pd(d + i + 4, r1);
      }
      if constexpr (kOut) _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
    } else {
      _mm256_storeu_pd(d + i, r0);
      _mm256_storeu_pd(d + i + 4, r1);
    }
  }
  *done = i;
}

template <class T, class Io, class Op>
int64_t reduce_half_modes(void* dst, const void* src_a, const uint16_t* s, uint16_t* out, int64_t n, bool round) {
  int64_t done = 0;
  T* d = static_cast<T*>(dst);
  const T* a = static_cast<const T*>(src_a);
  auto run = [&](auto round_c, auto out_c) {
    constexpr bool kRound = decltype(round_c)::value, kOut = decltype(out_c)::value;
    if constexpr (std::is_same_v<T, float>) {
      reduce_half_f32<Io, Op, kRound, kOut>(d, a, s, out, n, &done);
    } else {
      reduce_half_f64<Op, kRound, kOut>(d, a, s, out, n, &done);
    }
  };
  using T_ = std::true_type;
  using F_ = std::false_type;
  if (round) {
    out ? run(T_{}, T_{}) : run(T_{}, F_{});
  } else {
    out ? run(F_{}, T_{}) : run(F_{}, F_{});
  }
  return done;
}

template <class T, class Io>
int64_t reduce_half_dispatch(void* dst, const void* a, const uint16_t* s, uint16_t* out, int64_t n, ReduceOp op,
                             bool round) {
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum:
      return reduce_half_modes<T, Io, SumOp<T>>(dst, a, s, out, n, round);
    case ReduceOp::kMin:
      return reduce_half_modes<T, Io, MinOp<T>>(dst, a, s, out, n, round);
    case ReduceOp::kMax:
      return reduce_half_modes<T, Io, MaxOp<T>>(dst, a, s, out, n, round);
    case ReduceOp::kProduct:
      return reduce_half_modes<T, Io, ProductOp<T>>(dst, a, s, out, n, round);
    default:
      return n;
  }
}

}  // namespace

void avx2_reduce(void* dst, const void* a, const void* src, int64_t count, DataType dtype, ReduceOp op) {
  if (count <= 0) return;
  switch (dtype) {
    case DataType::kUInt8:
      return reduce_dispatch<uint8_t>(dst, a, src, count, dtype, op);
    case DataType::kInt8:
      return reduce_dispatch<int8_t>(dst, a, src, count, dtype, op);
    case DataType::kInt16:
      return reduce_dispatch<int16_t>(dst, a, src, count, dtype, op);
    case DataType::kInt32:
      return reduce_dispatch<int32_t>(dst, a, src, count, dtype, op);
    case DataType::kInt64:
      return reduce_dispatch<int64_t>(dst, a, src, count, dtype, op);
    case DataType::kFloat16:
      return reduce_16_dispatch<HalfIo>(dst, a, src, count, dtype, op);
    case DataType::kBFloat16:
      return reduce_16_dispatch<BfIo>(dst, a, src, count, dtype, op);
    case DataType::kFloat32:
      return reduce_dispatch<float>(dst, a, src, count, dtype, op);
    case DataType::kFloat64:
      return reduce_dispatch<double>(dst, a, src, count, dtype, op);
    case DataType::kBool:
      if (op == ReduceOp::kSum || op == ReduceOp::kAverage || op == ReduceOp::kMax) {
        return reduce_vec<uint8_t, OrOp>(dst, a, src, count, dtype, op);
      }
      return reduce_vec<uint8_t, AndOp>(dst, a, src, count, dtype, op);
  }
}

void avx2_scale_copy(void* dst, const void* src, int64_t count, DataType dtype, double factor) {
  if (count <= 0) return;
  switch (dtype) {
    case DataType::kFloat32:
      return scale_float_vec<float>(dst, src, count, dtype, static_cast<float>(factor));
    case DataType::kFloat64:
      return scale_float_vec<double>(dst, src, count, dtype, factor);
    case DataType::kFloat16:
      return scale_16_vec<HalfIo>(dst, src, count, dtype, factor);
    case DataType::kBFloat16:
      return scale_16_vec<BfIo>(dst, src, count, dtype, factor);
    case DataType::kInt32:
      return scale_int32_vec(dst, src, count, factor);
    default:  // the remaining integer types and bool: rare, the scalar loop is fine
      return scalar_scale_copy(dst, src, count, dtype, factor);
  }
}

void avx2_float_to_half_n(uint16_t* dst, const float* src, int64_t count) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) half8_store(dst + i, _mm256_loadu_ps(src + i));
  if (i < count) scalar_float_to_half_n(dst + i, src + i, count - i);
}

void avx2_half_to_float_n(float* dst, const uint16_t* src, int64_t count) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) _mm256_storeu_ps(dst + i, half8_load(src + i));
  if (i < count) scalar_half_to_float_n(dst + i, src + i, count - i);
}

void avx2_float_to_bfloat16_n(uint16_t* dst, const float* src, int64_t count) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) bf8_store(dst + i, _mm256_loadu_ps(src + i));
  if (i < count) scalar_float_to_bfloat16_n(dst + i, src + i, count - i);
}

void avx2_bfloat16_to_float_n(float* dst, const uint16_t* src, int64_t count) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) _mm256_storeu_ps(dst + i, bf8_load(src + i));
  if (i < count) scalar_bfloat16_to_float_n(dst + i, src + i, count - i);
}

void avx2_double_to_half_n(uint16_t* dst, const double* src, int64_t count) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128 lo = pd_to_ps_round_odd(_mm256_loadu_pd(src + i));
    const __m128 hi = pd_to_ps_round_odd(_mm256_loadu_pd(src + i + 4));
    half8_store(dst + i, _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1));
  }
  if (i < count) scalar_double_to_half_n(dst + i, src + i, count - i);
}

void avx2_half_to_double_n(double* dst, const uint16_t* src, int64_t count) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 f = half8_load(src + i);
    _mm256_storeu_pd(dst + i, _mm256_cvtps_pd(_mm256_castps256_ps128(f)));
    _mm256_storeu_pd(dst + i + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1)));
  }
  if (i < count) scalar_half_to_double_n(dst + i, src + i, count - i);
}

// Scalar up to a 32-byte boundary, streaming stores, scalar tail, then a
// store fence so the weakly ordered stores are globally visible on return.
void avx2_from_half_n_streaming(void* dst, const uint16_t* src, int64_t count, DataType dtype, DataType wire) {
  if (dtype != DataType::kFloat32 && dtype != DataType::kFloat64) return;
  if (wire == DataType::kBFloat16) {
    if (dtype == DataType::kFloat32) {
      float* f = static_cast<float*>(dst);
      int64_t i = 0;
      if (reinterpret_cast<uintptr_t>(f) % 32 == 0) {
        for (; i + 8 <= count; i += 8) _mm256_stream_ps(f + i, bf8_load(src + i));
        _mm_sfence();
      }
      if (i < count) avx2_bfloat16_to_float_n(f + i, src + i, count - i);
    } else {
      scalar_bfloat16_to_double_n(static_cast<double*>(dst), src, count);
    }
    return;
  }
  const int64_t es = dtype == DataType::kFloat32 ? 4 : 8;
  uint8_t* d = static_cast<uint8_t*>(dst);
  const int64_t misaligned = static_cast<int64_t>(reinterpret_cast<uintptr_t>(d) % 32);
  int64_t head = misaligned == 0 ? 0 : (32 - misaligned) / es;
  if (misaligned % es != 0 || head > count) head = count;  // not element-aligned: no streaming
  int64_t i = 0;
  if (head > 0) {
    if (es == 4) {
      scalar_half_to_float_n(reinterpret_cast<float*>(d), src, head);
    } else {
      scalar_half_to_double_n(reinterpret_cast<double*>(d), src, head);
    }
    i = head;
  }
  if (es == 4) {
    float* f = reinterpret_cast<float*>(d);
    for (; i + 16 <= count; i += 16) {
      _mm256_stream_ps(f + i, half8_load(src + i));
      _mm256_stream_ps(f + i + 8, half8_load(src + i + 8));
    }
    if (i < count) avx2_half_to_float_n(f + i, src + i, count - i);
  } else {
    double* g = reinterpret_cast<double*>(d);
    for (; i + 8 <= count; i += 8) {
      const __m256 w = half8_load(src + i);
      _mm256_stream_pd(g + i, _mm256_cvtps_pd(_mm256_castps256_ps128(w)));
      _mm256_stream_pd(g + i + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(w, 1)));
    }
    if (i < count) avx2_half_to_double_n(g + i, src + i, count - i);
  }
  _mm_sfence();
}

void avx2_reduce_half(void* dst, const void* a, const uint16_t* src, uint16_t* out, int64_t count, DataType dtype,
                      ReduceOp op, bool round_dst, DataType wire) {
  if (count <= 0) return;
  int64_t i = 0;
  const bool bf = wire == DataType::kBFloat16;
  if (dtype == DataType::kFloat32) {
    i = bf ? reduce_half_dispatch<float, BfIo>(dst, a, src, out, count, op, round_dst)
           : reduce_half_dispatch<float, HalfIo>(dst, a, src, out, count, op, round_dst);
  } else if (dtype == DataType::kFloat64 && !bf) {
    i = reduce_half_dispatch<double, HalfIo>(dst, a, src, out, count, op, round_dst);
  } else if (dtype != DataType::kFloat64) {
    return;
  }
  if (i < count) {
    const size_t es = dtype == DataType::kFloat32 ? 4 : 8;
    scalar_reduce_half(static_cast<uint8_t*>(dst) + i * es, static_cast<const uint8_t*>(a) + i * es, src + i,
                       out ? out + i : nullptr, count - i, dtype, op, round_dst, wire);
  }
}

}  // namespace detail
}  // namespace kernels
}  // namespace horovodlite

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif  // HVL_KERNELS_X86
