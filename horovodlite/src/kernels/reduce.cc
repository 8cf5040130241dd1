// Portable scalar kernels and the run-time dispatch to the AVX2/F16C ones.
#include "kernels/reduce.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/half.h"
#include "kernels/reduce_impl.h"

#if HVL_KERNELS_X86
#include <cpuid.h>
#endif

namespace horovodlite {
namespace kernels {
namespace detail {
namespace {

// Integer arithmetic wraps (done in an unsigned type wide enough that the C++
// promotions cannot overflow a signed int).
template <class T>
using WrapType = std::conditional_t<(sizeof(T) < 4), uint32_t, std::make_unsigned_t<T>>;

template <class T>
inline T op_sum(T d, T s) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<WrapType<T>>(d) + static_cast<WrapType<T>>(s));
  } else {
    return d + s;
  }
}

template <class T>
inline T op_product(T d, T s) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<WrapType<T>>(d) * static_cast<WrapType<T>>(s));
  } else {
    return d * s;
  }
}

// Min and max propagate a NaN from either side (s != s is false for integers).
template <class T>
inline T op_min(T d, T s) {
  return (s < d || s != s) ? s : d;
}

template <class T>
inline T op_max(T d, T s) {
  return (s > d || s != s) ? s : d;
}

// d[i] = f(a[i], s[i]); d may be a (in place).
template <class T, class F>
void reduce_loop(T* d, const T* a, const T* s, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) d[i] = f(a[i], s[i]);
}

template <class T>
void reduce_typed(void* dst, const void* src_a, const void* src, int64_t n, ReduceOp op) {
  T* d = static_cast<T*>(dst);
  const T* a = static_cast<const T*>(src_a);
  const T* s = static_cast<const T*>(src);
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum:
      return reduce_loop(d, a, s, n, op_sum<T>);
    case ReduceOp::kMin:
      return reduce_loop(d, a, s, n, op_min<T>);
    case ReduceOp::kMax:
      return reduce_loop(d, a, s, n, op_max<T>);
    case ReduceOp::kProduct:
      return reduce_loop(d, a, s, n, op_product<T>);
    default:
      return;
  }
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float), class F>
void reduce_16_loop(uint16_t* d, const uint16_t* a, const uint16_t* s, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) d[i] = FromFloat(f(ToFloat(a[i]), ToFloat(s[i])));
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void reduce_16(void* dst, const void* src_a, const void* src, int64_t n, ReduceOp op) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* a = static_cast<const uint16_t*>(src_a);
  const uint16_t* s = static_cast<const uint16_t*>(src);
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum:
      return reduce_16_loop<ToFloat, FromFloat>(d, a, s, n, op_sum<float>);
    case ReduceOp::kMin:
      return reduce_16_loop<ToFloat, FromFloat>(d, a, s, n, op_min<float>);
    case ReduceOp::kMax:
      return reduce_16_loop<ToFloat, FromFloat>(d, a, s, n, op_max<float>);
    case ReduceOp::kProduct:
      return reduce_16_loop<ToFloat, FromFloat>(d, a, s, n, op_product<float>);
    default:
      return;
  }
}

void reduce_bool(void* dst, const void* src_a, const void* src, int64_t n, ReduceOp op) {
  uint8_t* d = static_cast<uint8_t*>(dst);
  const uint8_t* a = static_cast<const uint8_t*>(src_a);
  const uint8_t* s = static_cast<const uint8_t*>(src);
  const bool is_or = op == ReduceOp::kSum || op == ReduceOp::kAverage || op == ReduceOp::kMax;
  if (is_or) {
    for (int64_t i = 0; i < n; ++i) d[i] = (a[i] | s[i]) != 0 ? 1 : 0;
  } else {
    for (int64_t i = 0; i < n; ++i) d[i] = (a[i] != 0 && s[i] != 0) ? 1 : 0;
  }
}

// double -> integer: truncation toward zero, saturated to the type's range, NaN -> 0.
template <class T>
inline T saturate_trunc(double p) {
  constexpr double kLo = static_cast<double>(std::numeric_limits<T>::min());
  constexpr double kHi = static_cast<double>(std::numeric_limits<T>::max());
  if (p != p) return 0;
  if (p <= kLo) return std::numeric_limits<T>::min();
  if (p >= kHi) return std::numeric_limits<T>::max();
  return static_cast<T>(p);
}

template <class T>
void scale_int(void* dst, const void* src, int64_t n, double factor) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  for (int64_t i = 0; i < n; ++i) d[i] = saturate_trunc<T>(static_cast<double>(s[i]) * factor);
}

template <class T, class M>
void scale_float(void* dst, const void* src, int64_t n, M factor) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  for (int64_t i = 0; i < n; ++i) d[i] = s[i] * factor;
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void scale_16(void* dst, const void* src, int64_t n, float factor) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) d[i] = FromFloat(ToFloat(s[i]) * factor);
}

// 16-bit wire: dst (float or double) (op)= widen(src), optionally rounded to
// the wire type and/or written out in it. Element by element, so out == src is
// fine. kBf: bfloat16 on the wire, else IEEE binary16.
template <class T, bool kBf>
inline uint16_t to_wire(T x) {
  if constexpr (kBf) {
    if constexpr (std::is_same_v<T, float>) {
      return float_to_bfloat16_scalar(x);
    } else {
      return double_to_bfloat16_scalar(x);
    }
  } else if constexpr (std::is_same_v<T, float>) {
    return float_to_half_scalar(x);
  } else {
    return double_to_half_scalar(x);
  }
}

template <bool kBf>
inline float from_wire(uint16_t h) {
  if constexpr (kBf) {
    return bfloat16_to_float_scalar(h);
  } else {
    return half_to_float_scalar(h);
  }
}

template <class T, bool kBf, bool kRound, bool kOut, class F>
void reduce_half_loop(T* d, const T* a, const uint16_t* s, uint16_t* out, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) {
    const T r = f(a[i], static_cast<T>(from_wire<kBf>(s[i])));
    if constexpr (kRound || kOut) {
      const uint16_t h = to_wire<T, kBf>(r);
      d[i] = kRound ? static_cast<T>(from_wire<kBf>(h)) : r;
      if constexpr (kOut) out[i] = h;
    } else {
      d[i] = r;
    }
  }
}

template <class T, bool kBf, class F>
void reduce_half_modes(T* d, const T* a, const uint16_t* s, uint16_t* out, int64_t n, bool round, F f) {
  if (round) {
    if (out) return reduce_half_loop<T, kBf, true, true>(d, a, s, out, n, f);
    return reduce_half_loop<T, kBf, true, false>(d, a, s, out, n, f);
  }
  if (out) return reduce_half_loop<T, kBf, false, true>(d, a, s, out, n, f);
  return reduce_half_loop<T, kBf, false, false>(d, a, s, out, n, f);
}

template <class T, bool kBf>
void reduce_half_typed(void* dst, const void* src_a, const uint16_t* s, uint16_t* out, int64_t n, ReduceOp op,
                       bool round) {
  T* d = static_cast<T*>(dst);
  const T* a = static_cast<const T*>(src_a);
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum:
      return reduce_half_modes<T, kBf>(d, a, s, out, n, round, op_sum<T>);
    case ReduceOp::kMin:
      return reduce_half_modes<T, kBf>(d, a, s, out, n, round, op_min<T>);
    case ReduceOp::kMax:
      return reduce_half_modes<T, kBf>(d, a, s, out, n, round, op_max<T>);
    case ReduceOp::kProduct:
      return reduce_half_modes<T, kBf>(d, a, s, out, n, round, op_product<T>);
    default:
      return;
  }
}

}  // namespace

void scalar_reduce_half(void* dst, const void* a, const uint16_t* src, uint16_t* out, int64_t count, DataType dtype,
                        ReduceOp op, bool round_dst, DataType wire) {
  if (count <= 0) return;
  const bool bf = wire == DataType::kBFloat16;
  if (dtype == DataType::kFloat32) {
    return bf ? reduce_half_typed<float, true>(dst, a, src, out, count, op, round_dst)
              : reduce_half_typed<float, false>(dst, a, src, out, count, op, round_dst);
  }
  if (dtype == DataType::kFloat64) {
    return bf ? reduce_half_typed<double, true>(dst, a, src, out, count, op, round_dst)
              : reduce_half_typed<double, false>(dst, a, src, out, count, op, round_dst);
  }
}

void scalar_reduce(void* dst, const void* a, const void* src, int64_t count, DataType dtype, ReduceOp op) {
  if (count <= 0) return;
  switch (dtype) {
    case DataType::kUInt8:
      return reduce_typed<uint8_t>(dst, a, src, count, op);
    case DataType::kInt8:
      return reduce_typed<int8_t>(dst, a, src, count, op);
    case DataType::kInt16:
      return reduce_typed<int16_t>(dst, a, src, count, op);
    case DataType::kInt32:
      return reduce_typed<int32_t>(dst, a, src, count, op);
    case DataType::kInt64:
      return reduce_typed<int64_t>(dst, a, src, count, op);
    case DataType::kFloat16:
      return reduce_16<half_to_float_scalar, float_to_half_scalar>(dst, a, src, count, op);
    case DataType::kBFloat16:
      return reduce_16<bfloat16_to_float_scalar, float_to_bfloat16_scalar>(dst, a, src, count, op);
    case DataType::kFloat32:
      return reduce_typed<float>(dst, a, src, count, op);
    case DataType::kFloat64:
      return reduce_typed<double>(dst, a, src, count, op);
    case DataType::kBool:
      return reduce_bool(dst, a, src, count, op);
  }
}

void scalar_scale_copy(void* dst, const void* src, int64_t count, DataType dtype, double factor) {
  if (count <= 0) return;
  switch (dtype) {
    case DataType::kUInt8:
      return scale_int<uint8_t>(dst, src, count, factor);
    case DataType::kInt8:
      return scale_int<int8_t>(dst, src, count, factor);
    case DataType::kInt16:
      return scale_int<int16_t>(dst, src, count, factor);
    case DataType::kInt32:
      return scale_int<int32_t>(dst, src, count, factor);
    case DataType::kInt64:
      return scale_int<int64_t>(dst, src, count, factor);
    case DataType::kFloat16:
      return scale_16<half_to_float_scalar, float_to_half_scalar>(dst, src, count, static_cast<float>(factor));
    case DataType::kBFloat16:
      return scale_16<bfloat16_to_float_scalar, float_to_bfloat16_scalar>(dst, src, count, static_cast<float>(factor));
    case DataType::kFloat32:
      return scale_float<float>(dst, src, count, static_cast<float>(factor));
    case DataType::kFloat64:
      return scale_float<double>(dst, src, count, factor);
    case DataType::kBool: {
      uint8_t* d = static_cast<uint8_t*>(dst);
      const uint8_t* s = static_cast<const uint8_t*>(src);
      const uint8_t nonzero_factor = factor != 0.0 ? 1 : 0;
      for (int64_t i = 0; i < count; ++i) d[i] = s[i] != 0 ? nonzero_factor : 0;
      return;
    }
  }
}

void scalar_float_to_half_n(uint16_t* dst, const float* src, int64_t count) {
  for (int64_t i = 0; i < count; ++i) dst[i] = float_to_half_scalar(src[i]);
}

void scalar_half_to_float_n(float* dst, const uint16_t* src, int64_t count) {
  for (int64_t i = 0; i < count; ++i) dst[i] = half_to_float_scalar(src[i]);
}

void scalar_double_to_half_n(uint16_t* dst, const double* src, int64_t count) {
  for (int64_t i = 0; i < count; ++i) dst[i] = double_to_half_scalar(src[i]);
}

void scalar_half_to_double_n(double* dst, const uint16_t* src, int64_t count) {
  for (int64_t i = 0; i < count; ++i) dst[i] = static_cast<double>(half_to_float_scalar(src[i]));
}

void scalar_float_to_bfloat16_n(uint16_t* dst, const float* src, int64_t count) {
  for (int64_t i = 0; i < count; ++i) dst[i] = float_to_bfloat16_scalar(src[i]);
}

void scalar_bfloat16_to_float_n(float* dst, const uint16_t* src, int64_t count) {
  for (int64_t i = 0; i < count; ++i) dst[i] = bfloat16_to_float_scalar(src[i]);
}

void scalar_double_to_bfloat16_n(uint16_t* dst, const double* src, int64_t count) {
  for (int64_t i = 0; i < count; ++i) dst[i] = double_to_bfloat16_scalar(src[i]);
}

void scalar_bfloat16_to_double_n(double* dst, const uint16_t* src, int64_t count) {
  for (int64_t i = 0; i < count; ++i) dst[i] = static_cast<double>(bfloat16_to_float_scalar(src[i]));
}

}  // namespace detail

namespace {

// CPUID: AVX, F16C and OSXSAVE in leaf 1, AVX2 in leaf 7, and the OS must
// save the YMM state (XCR0 bits 1 and 2). (Done by hand because not every
// compiler's __builtin_cpu_supports knows "f16c".)
bool detect_avx2_f16c() {
#if HVL_KERNELS_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const unsigned kOsxsave = 1u << 27, kAvx = 1u << 28, kF16c = 1u << 29;
  if ((c & (kOsxsave | kAvx | kF16c)) != (kOsxsave | kAvx | kF16c)) return false;
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & 6u) != 6u) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (b & (1u << 5)) != 0;  // AVX2
#else
  return false;
#endif
}

}  // namespace

bool cpu_has_avx2_f16c() {
  static const bool has = detect_avx2_f16c();
  return has;
}

void reduce(void* dst, const void* a, const void* b, int64_t count, DataType dtype, ReduceOp op) {
  if (count <= 0) return;
#if HVL_KERNELS_X86
  if (cpu_has_avx2_f16c()) return detail::avx2_reduce(dst, a, b, count, dtype, op);
#endif
  detail::scalar_reduce(dst, a, b, count, dtype, op);
}

void reduce_into(void* dst, const void* src, int64_t count, DataType dtype, ReduceOp op) {
  reduce(dst, dst, src, count, dtype, op);
}

void scale(void* buf, int64_t count, DataType dtype, double factor) {
  if (count <= 0 || factor == 1.0) return;
  scale_copy(buf, buf, count, dtype, factor);
}

void scale_copy(void* dst, const void* src, int64_t count, DataType dtype, double factor) {
  if (count <= 0) return;
  if (factor == 1.0) {
    if (dst != src) std::memcpy(dst, src, static_cast<size_t>(count) * dtype_size(dtype));
    return;
  }
#if HVL_KERNELS_X86
  if (cpu_has_avx2_f16c()) return detail::avx2_scale_copy(dst, src, count, dtype, factor);
#endif
  detail::scalar_scale_copy(dst, src, count, dtype, factor);
}

uint16_t float_to_half(float f) { return detail::float_to_half_scalar(f); }
float half_to_float(uint16_t h) { return detail::half_to_float_scalar(h); }
uint16_t float_to_bfloat16(float f) { return detail::float_to_bfloat16_scalar(f); }
float bfloat16_to_float(uint16_t b) { return detail::bfloat16_to_float_scalar(b); }

void float_to_half_n(uint16_t* dst, const float* src, int64_t count) {
#if HVL_KERNELS_X86
  if (cpu_has_avx2_f16c()) return detail::avx2_float_to_half_n(dst, src, count);
#endif
  detail::scalar_float_to_half_n(dst, src, count);
}

void half_to_float_n(float* dst, const uint16_t* src, int64_t count) {
#if HVL_KERNELS_X86
  if (cpu_has_avx2_f16c()) return detail::avx2_half_to_float_n(dst, src, count);
#endif
  detail::scalar_half_to_float_n(dst, src, count);
}

void double_to_half_n(uint16_t* dst, const double* src, int64_t count) {
#if HVL_KERNELS_X86
  if (cpu_has_avx2_f16c()) return detail::avx2_double_to_half_n(dst, src, count);
#endif
  detail::scalar_double_to_half_n(dst, src, count);
}

void half_to_double_n(double* dst, const uint16_t* src, int64_t count) {
#if HVL_KERNELS_X86
  if (cpu_has_avx2_f16c()) return detail::avx2_half_to_double_n(dst, src, count);
#endif
  detail::scalar_half_to_double_n(dst, src, count);
}

void float_to_bfloat16_n(uint16_t* dst, const float* src, int64_t count) {
#if HVL_KERNELS_X86
  if (cpu_has_avx2_f16c()) return detail::avx2_float_to_bfloat16_n(dst, src, count);
#endif
  detail::scalar_float_to_bfloat16_n(dst, src, count);
}

void bfloat16_to_float_n(float* dst, const uint16_t* src, int64_t count) {
#if HVL_KERNELS_X86
  if (cpu_has_avx2_f16c()) return detail::avx2_bfloat16_to_float_n(dst, src, count);
#endif
  detail::scalar_bfloat16_to_float_n(dst, src, count);
}

void double_to_bfloat16_n(uint16_t* dst, const double* src, int64_t count) {
  detail::scalar_double_to_bfloat16_n(dst, src, count);
}

void bfloat16_to_double_n(double* dst, const uint16_t* src, int64_t count) {
  detail::scalar_bfloat16_to_double_n(dst, src, count);
}

void to_half_n(uint16_t* out, const void* src, int64_t count, DataType dtype, DataType wire) {
  if (count <= 0) return;
  const bool bf = wire == DataType::kBFloat16;
  if (dtype == DataType::kFloat32) {
    const auto* f = static_cast<const float*>(src);
    return bf ? float_to_bfloat16_n(out, f, count) : float_to_half_n(out, f, count);
  }
  if (dtype == DataType::kFloat64) {
    const auto* d = static_cast<const double*>(src);
    return bf ? double_to_bfloat16_n(out, d, count) : double_to_half_n(out, d, count);
  }
}

void from_half_n(void* dst, const uint16_t* src, int64_t count, DataType dtype, DataType wire) {
  if (count <= 0) return;
  const bool bf = wire == DataType::kBFloat16;
  if (dtype == DataType::kFloat32) {
    auto* f = static_cast<float*>(dst);
    return bf ? bfloat16_to_float_n(f, src, count) : half_to_float_n(f, src, count);
  }
  if (dtype == DataType::kFloat64) {
    auto* d = static_cast<double*>(dst);
    return bf ? bfloat16_to_double_n(d, src, count) : half_to_double_n(d, src, count);
  }
}

void scale_as_half(void* buf, int64_t count, DataType dtype, double factor, DataType wire) {
  if (factor == 1.0 || count <= 0) return;
  if (dtype != DataType::kFloat32 && dtype != DataType::kFloat64) return scale(buf, count, dtype, factor);
  constexpr int64_t kChunk = 1024;
  uint16_t half[kChunk];
  char* p = static_cast<char*>(buf);
  const size_t esize = dtype_size(dtype);
  for (int64_t done = 0; done < count; done += kChunk) {
    const int64_t n = std::min(kChunk, count - done);
    void* chunk = p + done * esize;
    scale(chunk, n, dtype, factor);
    to_half_n(half, chunk, n, dtype, wire);
    from_half_n(chunk, half, n, dtype, wire);
  }
}

void from_half_n_streaming(void* dst, const uint16_t* src, int64_t count, DataType dtype, DataType wire) {
  if (count <= 0) return;
#if HVL_KERNELS_X86
  if (cpu_has_avx2_f16c()) return detail::avx2_from_half_n_streaming(dst, src, count, dtype, wire);
#endif
  from_half_n(dst, src, count, dtype, wire);
}

void reduce_half(void* dst, const void* a, const uint16_t* src, uint16_t* out, int64_t count, DataType dtype,
                 ReduceOp op, bool round_dst, DataType wire) {
  if (count <= 0) return;
#if HVL_KERNELS_X86
  if (cpu_has_avx2_f16c()) return detail::avx2_reduce_half(dst, a, src, out, count, dtype, op, round_dst, wire);
#endif
  detail::scalar_reduce_half(dst, a, src, out, count, dtype, op, round_dst, wire);
}

void reduce_half_into(void* dst, const uint16_t* src, uint16_t* out, int64_t count, DataType dtype, ReduceOp op,
                      bool round_dst, DataType wire) {
  reduce_half(dst, dst, src, out, count, dtype, op, round_dst, wire);
}

}  // namespace kernels
}  // namespace horovodlite
