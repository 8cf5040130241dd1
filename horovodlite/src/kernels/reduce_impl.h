// The two implementations behind kernels/reduce.h: a portable scalar one and
// an AVX2/F16C one (x86-64 only). reduce.cc dispatches between them at run
// time; tests call both directly to compare them. Both give bit-identical
// results for every dtype and op (the vector kernels finish odd tails with the
// scalar ones).
#pragma once

#include <cstdint>

#include "horovodlite/common.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define HVL_KERNELS_X86 1
#else
#define HVL_KERNELS_X86 0
#endif

namespace horovodlite {
namespace kernels {
namespace detail {

// dst = a (op) src; the *_into forms are the in-place case (a == dst).
void scalar_reduce(void* dst, const void* a, const void* src, int64_t count, DataType dtype, ReduceOp op);
inline void scalar_reduce_into(void* dst, const void* src, int64_t count, DataType dtype, ReduceOp op) {
  scalar_reduce(dst, dst, src, count, dtype, op);
}
void scalar_scale_copy(void* dst, const void* src, int64_t count, DataType dtype, double factor);
void scalar_float_to_half_n(uint16_t* dst, const float* src, int64_t count);
void scalar_half_to_float_n(float* dst, const uint16_t* src, int64_t count);
void scalar_double_to_half_n(uint16_t* dst, const double* src, int64_t count);
void scalar_half_to_double_n(double* dst, const uint16_t* src, int64_t count);
void scalar_float_to_bfloat16_n(uint16_t* dst, const float* src, int64_t count);
void scalar_bfloat16_to_float_n(float* dst, const uint16_t* src, int64_t count);
void scalar_double_to_bfloat16_n(uint16_t* dst, const double* src, int64_t count);
void scalar_bfloat16_to_double_n(double* dst, const uint16_t* src, int64_t count);
// `wire`: kFloat16 or kBFloat16 (kernels/reduce.h, reduce_half).
void scalar_reduce_half(void* dst, const void* a, const uint16_t* src, uint16_t* out, int64_t count, DataType dtype,
                        ReduceOp op, bool round_dst, DataType wire = DataType::kFloat16);
inline void scalar_reduce_half_into(void* dst, const uint16_t* src, uint16_t* out, int64_t count, DataType dtype,
                                    ReduceOp op, bool round_dst, DataType wire = DataType::kFloat16) {
  scalar_reduce_half(dst, dst, src, out, count, dtype, op, round_dst, wire);
}

#if HVL_KERNELS_X86
// Callable only when cpu_has_avx2_f16c() is true.
void avx2_reduce(void* dst, const void* a, const void* src, int64_t count, DataType dtype, ReduceOp op);
inline void avx2_reduce_into(void* dst, const void* src, int64_t count, DataType dtype, ReduceOp op) {
  avx2_reduce(dst, dst, src, count, dtype, op);
}
void avx2_scale_copy(void* dst, const void* src, int64_t count, DataType dtype, double factor);
void avx2_float_to_half_n(uint16_t* dst, const float* src, int64_t count);
void avx2_half_to_float_n(float* dst, const uint16_t* src, int64_t count);
void avx2_double_to_half_n(uint16_t* dst, const double* src, int64_t count);
void avx2_half_to_double_n(double* dst, const uint16_t* src, int64_t count);
void avx2_float_to_bfloat16_n(uint16_t* dst, const float* src, int64_t count);
void avx2_bfloat16_to_float_n(float* dst, const uint16_t* src, int64_t count);
void avx2_from_half_n_streaming(void* dst, const uint16_t* src, int64_t count, DataType dtype,
                                DataType wire = DataType::kFloat16);
// float32 with either wire; float64 vectorised for kFloat16 (bf16: the scalar loop).
void avx2_reduce_half(void* dst, const void* a, const uint16_t* src, uint16_t* out, int64_t count, DataType dtype,
                      ReduceOp op, bool round_dst, DataType wire = DataType::kFloat16);
inline void avx2_reduce_half_into(void* dst, const uint16_t* src, uint16_t* out, int64_t count, DataType dtype,
                                  ReduceOp op, bool round_dst, DataType wire = DataType::kFloat16) {
  avx2_reduce_half(dst, dst, src, out, count, dtype, op, round_dst, wire);
}
#endif

}  // namespace detail
}  // namespace kernels
}  // namespace horovodlite
