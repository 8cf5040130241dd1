// Adasum's float32, float16 and bfloat16 kernels with AVX2/FMA (float16 with
// F16C), chosen at run time (adasum_kernels.h).
#include "ops/adasum_kernels.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "kernels/avx2_16bit.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace horovodlite {
namespace adasum_kernels {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HVL_ADASUM_AVX2 1

namespace {

__attribute__((target("avx2,fma"))) double hsum(__m256d v) {
  const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

// Software prefetch. The pieces are walked in 256 KiB segments, the
// combination's segments last first, and the hardware streamer restarts at
// every 4 KiB page.
//
// The combination prefetches both pieces 4 KiB ahead into L1: with the caches
// flushed it was faster with it than without; a scratch copy without it, or
// with it into L2, was not faster beyond the noise: left as it is.
//
// The dot products read this rank's piece from memory (at the first level:
// the user's tensor) against the partner's segment, just copied in and still
// in cache. Three multiply-adds in double per element pair make them as much
// bound by arithmetic as by memory, and with the L1 prefetch they kept too few
// lines in flight: from memory they took about twice the time of the
// arithmetic alone. Prefetched into L2 8 KiB ahead instead (L2 holds more
// misses in flight than L1's miss buffers), and only the piece from memory,
// they run at about the arithmetic's speed (bench/kernels/bench_adasum_kernels).
// Prefetches past the end of a piece are harmless (they never fault; the
// neighbouring segment).
constexpr uintptr_t kPrefetchL1Bytes = 4096;
constexpr uintptr_t kPrefetchL2Bytes = 8192;

__attribute__((target("avx2,fma"), always_inline)) inline void prefetch_l1(const void* p) {
  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) + kPrefetchL1Bytes), _MM_HINT_T0);
}

__attribute__((target("avx2,fma"), always_inline)) inline void prefetch_l2(const void* p) {
  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) + kPrefetchL2Bytes), _MM_HINT_T1);
}

struct DotsAcc {
  __m256d d0, d1, xx0, xx1, yy0, yy1;
};

// Eight elements as doubles (a0, b0 the first four, a1, b1 the next): the
// first four into the *0 accumulators, the next four into the *1.
__attribute__((target("avx2,fma"), always_inline)) inline void accumulate(__m256d a0, __m256d a1, __m256d b0,
                                                                          __m256d b1, DotsAcc& s) {
  s.d0 = _mm256_fmadd_pd(a0, b0, s.d0);
  s.d1 = _mm256_fmadd_pd(a1, b1, s.d1);
  s.xx0 = _mm256_fmadd_pd(a0, a0, s.xx0);
  s.xx1 = _mm256_fmadd_pd(a1, a1, s.xx1);
  s.yy0 = _mm256_fmadd_pd(b0, b0, s.yy0);
  s.yy1 = _mm256_fmadd_pd(b1, b1, s.yy1);
}

__attribute__((target("avx2,fma"), always_inline)) inline void dots8(const float* x, const float* y, DotsAcc& s) {
  // Converted straight from memory (vcvtps2pd ymm, m128): no 128-bit
  // extracts, which competed with the conversions for the same port.
  accumulate(_mm256_cvtps_pd(_mm_loadu_ps(x)), _mm256_cvtps_pd(_mm_loadu_ps(x + 4)), _mm256_cvtps_pd(_mm_loadu_ps(y)),
             _mm256_cvtps_pd(_mm_loadu_ps(y + 4)), s);
}

// The accumulators' sums and elements [i, n) one by one (pair(k): element k of
// x and of y, as doubles), added into out.
template <typename Pair>
__attribute__((target("avx2,fma"), always_inline)) inline void finish_dots(const DotsAcc& s, int64_t i, int64_t n,
                                                                           Pair pair, Scalar out[3]) {
  double d = hsum(_mm256_add_pd(s.d0, s.d1)), xx = hsum(_mm256_add_pd(s.xx0, s.xx1)),
         yy = hsum(_mm256_add_pd(s.yy0, s.yy1));
  for (; i < n; ++i) {
    const auto [a, b] = pair(i);
    d += a * b;
    xx += a * a;
    yy += b * b;
  }
  out[0] += d;
  out[1] += xx;
  out[2] += yy;
}

__attribute__((target("avx2,fma"))) void dots_f32_avx2(const float* x, const float* y, int64_t n, Scalar out[3]) {
  const __m256d z = _mm256_setzero_pd();
  DotsAcc s{z, z, z, z, z, z};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {  // one cache line of each; x's prefetched ahead
    prefetch_l2(x + i);
    dots8(x + i, y + i, s);
    dots8(x + i + 8, y + i + 8, s);
  }
  for (; i + 8 <= n; i += 8) dots8(x + i, y + i, s);
  finish_dots(
      s, i, n, [&](int64_t k) { return std::pair<double, double>(x[k], y[k]); }, out);
}

// Stream: non-temporal stores (out 16-byte aligned), for a send slot that a
// peer's core reads next (stream_copy in adasum_kernels.h).
template <bool Stream>
__attribute__((target("avx2,fma"), always_inline)) inline void combine4(float* out, const float* x, const float* y,
                                                                        __m256d vx, __m256d vy) {
  const __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(x)), b = _mm256_cvtps_pd(_mm_loadu_ps(y));
  const __m128 r = _mm256_cvtpd_ps(_mm256_fmadd_pd(vx, a, _mm256_mul_pd(vy, b)));
  if (Stream) {
    _mm_stream_ps(out, r);
  } else {
    _mm_storeu_ps(out, r);
  }
}

template <bool Stream>
__attribute__((target("avx2,fma"))) void combine_f32_avx2(float* out, const float* x, const float* y, int64_t n,
                                                          double cx, double cy) {
  const __m256d vx = _mm256_set1_pd(cx), vy = _mm256_set1_pd(cy);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    prefetch_l1(x + i);
    prefetch_l1(y + i);
    for (int k = 0; k < 16; k += 4) combine4<Stream>(out + i + k, x + i + k, y + i + k, vx, vy);
  }
  for (; i + 4 <= n; i += 4) combine4<Stream>(out + i, x + i, y + i, vx, vy);
  if (Stream) _mm_sfence();
  for (; i < n; ++i) out[i] = static_cast<float>(cx * x[i] + cy * y[i]);
}

bool use_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

// ---- float16 and bfloat16: widened 8 at a time (F16C; bfloat16 by a shift),
// accumulated and combined in double as the generic loops, rounded back once ----

bool use_f16c() {
  static const bool yes = use_avx2() && __builtin_cpu_supports("f16c");
  return yes;
}

// The 16-bit formats: 8 at a time as the reduction kernels do (kernels/avx2_16bit.h),
// one at a time as the generic loops (adasum_kernels.h).
struct Half : kernels::detail::HalfIo {
  static constexpr bool kTinyToScalar = false;  // below 2^-126 float16 holds only zero
  static double load1(uint16_t x) { return F16::load(x); }
  static uint16_t store1(double v) { return F16::store(v); }
};
struct Brain : kernels::detail::BfIo {
  static constexpr bool kTinyToScalar = true;  // bfloat16 has float's subnormals
  static double load1(uint16_t x) { return BF16::load(x); }
  static uint16_t store1(double v) { return BF16::store(v); }
};

__attribute__((target("avx2,fma,f16c"), always_inline)) inline void dots8_ps(__m256 a, __m256 b, DotsAcc& s) {
  accumulate(_mm256_cvtps_pd(_mm256_castps256_ps128(a)), _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)),
             _mm256_cvtps_pd(_mm256_castps256_ps128(b)), _mm256_cvtps_pd(_mm256_extractf128_ps(b, 1)), s);
}

template <typename H>
__attribute__((target("avx2,fma,f16c"))) void dots16_avx2(const uint16_t* x, const uint16_t* y, int64_t n,
                                                          Scalar out[3]) {
  const __m256d z = _mm256_setzero_pd();
  DotsAcc s{z, z, z, z, z, z};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {  // one cache line of each; x's prefetched ahead (as dots_f32_avx2)
    prefetch_l2(x + i);
    for (int k = 0; k < 32; k += 8) dots8_ps(H::load(x + i + k), H::load(y + i + k), s);
  }
  for (; i + 8 <= n; i += 8) dots8_ps(H::load(x + i), H::load(y + i), s);
  finish_dots(
      s, i, n, [&](int64_t k) { return std::pair<double, double>(H::load1(x[k]), H::load1(y[k])); }, out);
}

// Four doubles to float rounded to odd (the BF16 store's rule, adasum_kernels.h),
// in the double's bits: its significand cut to float's 24 bits, the last of them
// set where anything was cut, after which the conversion to float is exact. Then
// one rounding to nearest even into float16 or bfloat16 equals a single rounding
// of the double (float keeps more than two bits beyond either). Exact down to
// float's smallest normal; below it the conversion rounds again, which only
// bfloat16 can see (its subnormals): combine16_avx2 sends those to the scalar store.
__attribute__((target("avx2,fma,f16c"), always_inline)) inline __m128 to_float_odd(__m256d v) {
  const __m256i q = _mm256_castpd_si256(v);
  const __m256i cut = _mm256_set1_epi64x((int64_t{1} << 29) - 1);  // double's 52 - float's 23 bits
  const __m256i any = _mm256_cmpeq_epi64(_mm256_and_si256(q, cut), _mm256_setzero_si256());
  const __m256i odd = _mm256_andnot_si256(any, _mm256_set1_epi64x(int64_t{1} << 29));
  return _mm256_cvtpd_ps(_mm256_castsi256_pd(_mm256_or_si256(_mm256_andnot_si256(cut, q), odd)));
}

template <typename H>
__attribute__((target("avx2,fma,f16c"))) void combine16_avx2(uint16_t* out, const uint16_t* x, const uint16_t* y,
                                                             int64_t n, double cx, double cy) {
  const __m256d vx = _mm256_set1_pd(cx), vy = _mm256_set1_pd(cy);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    if ((i & 31) == 0) {
      prefetch_l1(x + i);
      prefetch_l1(y + i);
    }
    const __m256 a = H::load(x + i), b = H::load(y + i);
    const __m256d lo = _mm256_fmadd_pd(vx, _mm256_cvtps_pd(_mm256_castps256_ps128(a)),
                                       _mm256_mul_pd(vy, _mm256_cvtps_pd(_mm256_castps256_ps128(b))));
    const __m256d hi = _mm256_fmadd_pd(vx, _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)),
                                       _mm256_mul_pd(vy, _mm256_cvtps_pd(_mm256_extractf128_ps(b, 1))));
    if (H::kTinyToScalar) {  // nonzero below float's smallest normal: rare
      const __m256d sign = _mm256_set1_pd(-0.0), tiny = _mm256_set1_pd(0x1p-126), zero = _mm256_setzero_pd();
      const __m256d alo = _mm256_andnot_pd(sign, lo), ahi = _mm256_andnot_pd(sign, hi);
      const __m256d tlo = _mm256_and_pd(_mm256_cmp_pd(alo, tiny, _CMP_LT_OQ), _mm256_cmp_pd(alo, zero, _CMP_NEQ_OQ));
      const __m256d thi = _mm256_and_pd(_mm256_cmp_pd(ahi, tiny, _CMP_LT_OQ), _mm256_cmp_pd(ahi, zero, _CMP_NEQ_OQ));
      if (_mm256_movemask_pd(_mm256_or_pd(tlo, thi)) != 0) {
        alignas(32) double r[8];
        _mm256_store_pd(r, lo);
        _mm256_store_pd(r + 4, hi);
        for (int k = 0; k < 8; ++k) out[i + k] = H::store1(r[k]);
        continue;
      }
    }
    H::store(out + i, _mm256_set_m128(to_float_odd(hi), to_float_odd(lo)));
  }
  for (; i < n; ++i) out[i] = H::store1(std::fma(cx, H::load1(x[i]), cy * H::load1(y[i])));
}

}  // namespace

bool half_kernels_vectorized() { return use_f16c(); }

bool dots_16bit(bool bfloat16, const uint16_t* x, const uint16_t* y, int64_t n, Scalar out[3]) {
  if (!use_f16c()) return false;
  bfloat16 ? dots16_avx2<Brain>(x, y, n, out) : dots16_avx2<Half>(x, y, n, out);
  return true;
}

bool combine_16bit(bool bfloat16, uint16_t* out, const uint16_t* x, const uint16_t* y, int64_t n, Scalar cx,
                   Scalar cy) {
  if (!use_f16c()) return false;
  const double a = static_cast<double>(cx), b = static_cast<double>(cy);
  bfloat16 ? combine16_avx2<Brain>(out, x, y, n, a, b) : combine16_avx2<Half>(out, x, y, n, a, b);
  return true;
}

void dots_f32(const float* x, const float* y, int64_t n, Scalar out[3]) {
  if (use_avx2()) return dots_f32_avx2(x, y, n, out);
  dots_generic<F32>(x, y, n, out);
}

void combine_f32(float* out, const float* x, const float* y, int64_t n, Scalar cx, Scalar cy, bool stream) {
  if (!use_avx2()) return combine_generic<F32>(out, x, y, n, cx, cy);
  if (stream && (reinterpret_cast<uintptr_t>(out) & 15) == 0) {
    return combine_f32_avx2<true>(out, x, y, n, static_cast<double>(cx), static_cast<double>(cy));
  }
  combine_f32_avx2<false>(out, x, y, n, static_cast<double>(cx), static_cast<double>(cy));
}

void stream_copy(void* dst, const void* src, size_t bytes) {
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  size_t i = 0;
  if ((reinterpret_cast<uintptr_t>(d) & 15) == 0) {
    for (; i + 64 <= bytes; i += 64) {  // SSE2: every x86-64 has it
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
      const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
    }
    _mm_sfence();
  }
  if (i < bytes) std::memcpy(d + i, s + i, bytes - i);
}
#else
bool half_kernels_vectorized() { return false; }
bool dots_16bit(bool, const uint16_t*, const uint16_t*, int64_t, Scalar[3]) { return false; }
bool combine_16bit(bool, uint16_t*, const uint16_t*, const uint16_t*, int64_t, Scalar, Scalar) { return false; }
void dots_f32(const float* x, const float* y, int64_t n, Scalar out[3]) { dots_generic<F32>(x, y, n, out); }
void combine_f32(float* out, const float* x, const float* y, int64_t n, Scalar cx, Scalar cy, bool) {
  combine_generic<F32>(out, x, y, n, cx, cy);
}
void stream_copy(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
#endif

}  // namespace adasum_kernels
}  // namespace horovodlite
