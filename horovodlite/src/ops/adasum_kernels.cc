// Adasum's float32 kernels with AVX2/FMA (adasum_kernels.h).
#include "ops/adasum_kernels.h"

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

__attribute__((target("avx2,fma"))) void dots_f32_avx2(const float* x, const float* y, int64_t n, Scalar out[3]) {
  __m256d d0 = _mm256_setzero_pd(), d1 = d0, xx0 = d0, xx1 = d0, yy0 = d0, yy1 = d0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    // Converted straight from memory (vcvtps2pd ymm, m128): no 128-bit
    // extracts, which competed with the conversions for the same port.
    const __m256d a0 = _mm256_cvtps_pd(_mm_loadu_ps(x + i)), a1 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
    const __m256d b0 = _mm256_cvtps_pd(_mm_loadu_ps(y + i)), b1 = _mm256_cvtps_pd(_mm_loadu_ps(y + i + 4));
    d0 = _mm256_fmadd_pd(a0, b0, d0);
    d1 = _mm256_fmadd_pd(a1, b1, d1);
    xx0 = _mm256_fmadd_pd(a0, a0, xx0);
    xx1 = _mm256_fmadd_pd(a1, a1, xx1);
    yy0 = _mm256_fmadd_pd(b0, b0, yy0);
    yy1 = _mm256_fmadd_pd(b1, b1, yy1);
  }
  double d = hsum(_mm256_add_pd(d0, d1)), xx = hsum(_mm256_add_pd(xx0, xx1)), yy = hsum(_mm256_add_pd(yy0, yy1));
  for (; i < n; ++i) {
    const double a = x[i], b = y[i];
    d += a * b;
    xx += a * a;
    yy += b * b;
  }
  out[0] += d;
  out[1] += xx;
  out[2] += yy;
}

__attribute__((target("avx2,fma"))) void combine_f32_avx2(float* out, const float* x, const float* y, int64_t n,
                                                          double cx, double cy) {
  const __m256d vx = _mm256_set1_pd(cx), vy = _mm256_set1_pd(cy);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(x + i)), b = _mm256_cvtps_pd(_mm_loadu_ps(y + i));
    _mm_storeu_ps(out + i, _mm256_cvtpd_ps(_mm256_fmadd_pd(vx, a, _mm256_mul_pd(vy, b))));
  }
  for (; i < n; ++i) out[i] = static_cast<float>(cx * x[i] + cy * y[i]);
}


bool use_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

}  // namespace

void dots_f32(const float* x, const float* y, int64_t n, Scalar out[3]) {
  if (use_avx2()) return dots_f32_avx2(x, y, n, out);
  dots_generic<F32>(x, y, n, out);
}

void combine_f32(float* out, const float* x, const float* y, int64_t n, Scalar cx, Scalar cy) {
  if (use_avx2()) return combine_f32_avx2(out, x, y, n, static_cast<double>(cx), static_cast<double>(cy));
  combine_generic<F32>(out, x, y, n, cx, cy);
}
#else
void dots_f32(const float* x, const float* y, int64_t n, Scalar out[3]) { dots_generic<F32>(x, y, n, out); }
void combine_f32(float* out, const float* x, const float* y, int64_t n, Scalar cx, Scalar cy) {
  combine_generic<F32>(out, x, y, n, cx, cy);
}
#endif

}  // namespace adasum_kernels
}  // namespace horovodlite
