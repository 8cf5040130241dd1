// Eight float16 or bfloat16 values widened to float (exactly) and rounded back
// (to nearest even; bfloat16 NaNs kept quiet, as float_to_bfloat16_scalar), with
// AVX2/F16C: for the AVX2 kernels (kernels/reduce_avx2.cc, ops/adasum_kernels.cc),
// which call them only after checking the CPU. Internal linkage in every file
// that includes this (an anonymous namespace), so that no AVX2 copy of them can
// be picked by the linker for portable code.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#include <cstdint>

namespace horovodlite {
namespace kernels {
namespace detail {
namespace {

__attribute__((target("avx2,f16c"))) inline __m256 half8_load(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
__attribute__((target("avx2,f16c"))) inline void half8_store(uint16_t* p, __m256 f) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// bfloat16: the upper half of a float; rounding to nearest even adds 0x7fff
// plus the kept lowest bit, and a NaN keeps its top bits with the quiet bit set.
__attribute__((target("avx2,f16c"))) inline __m256 bf8_unpack(__m128i b) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
}
__attribute__((target("avx2,f16c"))) inline __m128i bf8_pack(__m256 f) {
  const __m256i x = _mm256_castps_si256(f);
  const __m256i hi = _mm256_srli_epi32(x, 16);
  const __m256i odd = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), odd), 16);
  const __m256i quiet_nan = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
  const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
  r = _mm256_blendv_epi8(r, quiet_nan, is_nan);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08));
}
__attribute__((target("avx2,f16c"))) inline __m256 bf8_load(const uint16_t* p) {
  return bf8_unpack(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
__attribute__((target("avx2,f16c"))) inline void bf8_store(uint16_t* p, __m256 f) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), bf8_pack(f));
}

// The two as types, for kernels templated on the 16-bit format.
struct HalfIo {
  __attribute__((target("avx2,f16c"))) static __m256 load(const uint16_t* p) { return half8_load(p); }
  __attribute__((target("avx2,f16c"))) static void store(uint16_t* p, __m256 f) { half8_store(p, f); }
  __attribute__((target("avx2,f16c"))) static __m128i pack(__m256 f) {
    return _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  __attribute__((target("avx2,f16c"))) static __m256 unpack(__m128i h) { return _mm256_cvtph_ps(h); }
};
struct BfIo {
  __attribute__((target("avx2,f16c"))) static __m256 load(const uint16_t* p) { return bf8_load(p); }
  __attribute__((target("avx2,f16c"))) static void store(uint16_t* p, __m256 f) { bf8_store(p, f); }
  __attribute__((target("avx2,f16c"))) static __m128i pack(__m256 f) { return bf8_pack(f); }
  __attribute__((target("avx2,f16c"))) static __m256 unpack(__m128i b) { return bf8_unpack(b); }
};

}  // namespace
}  // namespace detail
}  // namespace kernels
}  // namespace horovodlite

#endif
