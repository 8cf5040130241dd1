// Element-wise kernels for the host data path: reductions for every dtype and
// op, scaling, and fp16/bf16 conversion. Each entry point picks an AVX2/F16C
// implementation at run time when the CPU has one, else a portable one; both
// give bit-identical results (NaN payloads aside).
//
// Semantics:
// - Pointers must be aligned to the element size (no vector alignment needed);
//   the operands of a reduction must not overlap partially (dst == an input is
//   fine: that is the in-place case).
// - Integers: Sum and Product wrap around (two's complement), never UB.
// - Floats: Min/Max return a NaN if either side is NaN; -0.0 vs +0.0 keeps the
//   first operand (dst for the *_into forms).
// - float16 (IEEE binary16) and bfloat16 reduce by widening to float, applying
//   the op in float, and rounding back to nearest even.
// - bool (one byte, 0/1): Sum/Average/Max = logical or, Min/Product = logical
//   and; results are always 0 or 1.
// - Half conversions round to nearest even; finite values beyond the fp16 range
//   (|x| >= 65520) become +-inf; NaN stays NaN (quiet, top payload bits kept);
//   subnormal halves are produced and read exactly; -0.0 keeps its sign.
//   double -> half rounds once (not via float). These assume the default
//   MXCSR (no flush-to-zero / denormals-are-zero) on the vector path.
// - bfloat16 conversion: round to nearest even, overflow to inf, NaN quiet.
#pragma once

#include <cstdint>

#include "horovodlite/common.h"

namespace horovodlite {
namespace kernels {

// dst[i] = dst[i] (op) src[i] for i < count. Average reduces as Sum (the division
// is a postscale). bool: Sum/Max = logical or, Min/Product = logical and.
void reduce_into(void* dst, const void* src, int64_t count, DataType dtype, ReduceOp op);
// dst[i] = a[i] (op) b[i]: the same, out of place (dst may be a or b).
void reduce(void* dst, const void* a, const void* b, int64_t count, DataType dtype, ReduceOp op);

// buf[i] *= factor. Integers: the product is computed in double, truncated
// toward zero and saturated to the type's range (NaN -> 0). float32, float16
// and bfloat16 multiply in float by (float)factor; float64 in double.
// bool: not meant to be scaled (the caller rejects it); if asked, a nonzero
// element stays 1 when factor != 0. factor == 1 returns at once.
void scale(void* buf, int64_t count, DataType dtype, double factor);

// dst[i] = src[i] * factor, copying (fused pack/unpack with scaling); factor 1 is a memcpy.
void scale_copy(void* dst, const void* src, int64_t count, DataType dtype, double factor);

// IEEE binary16 and bfloat16 conversions (round to nearest even; values beyond
// the fp16 range become +-inf, NaN stays NaN).
uint16_t float_to_half(float f);
float half_to_float(uint16_t h);
uint16_t float_to_bfloat16(float f);
float bfloat16_to_float(uint16_t b);
void float_to_half_n(uint16_t* dst, const float* src, int64_t count);
void half_to_float_n(float* dst, const uint16_t* src, int64_t count);
void double_to_half_n(uint16_t* dst, const double* src, int64_t count);
void half_to_double_n(double* dst, const uint16_t* src, int64_t count);

// 16-bit-on-the-wire kernels: a float32 or float64 buffer (dtype kFloat32 or
// kFloat64; any other dtype is a no-op) exchanged as 16-bit values of type
// `wire`: kFloat16 (IEEE binary16, fp16 compression) or kBFloat16 (bf16
// compression). Rounding follows the rules above (double rounds once, not via
// float, for both). The "half" in the names is the 16-bit wire value.
// to_half_n:   out[i] = half(src[i]).
// from_half_n: dst[i] = widen(src[i]) (exact).
// reduce_half_into: dst[i] = dst[i] (op) widen(src[i]), computed in dst's type;
//   then, if `round_dst`, dst[i] = widen(half(dst[i])) (so that dst holds
//   exactly what a receiver of the half gets); then, if `out` is non-null,
//   out[i] = half(dst[i]). `out` may equal `src` (in place) but must not
//   overlap it otherwise. Average reduces as Sum.
void to_half_n(uint16_t* out, const void* src, int64_t count, DataType dtype, DataType wire = DataType::kFloat16);
void from_half_n(void* dst, const uint16_t* src, int64_t count, DataType dtype, DataType wire = DataType::kFloat16);
// Same values as from_half_n, stored with non-temporal (streaming) stores on
// the vector path: for large destinations that will not be read again soon.
void from_half_n_streaming(void* dst, const uint16_t* src, int64_t count, DataType dtype,
                           DataType wire = DataType::kFloat16);
// buf[i] = widen(half(buf[i] * factor)): a result scaled in the wire type's
// precision, as Horovod scales its fp16 buffers (Average's division, a
// postscale), so that fp16-compressed results are the fp16 values Horovod
// returns (and bf16-compressed ones bf16 values). factor 1: no-op.
void scale_as_half(void* buf, int64_t count, DataType dtype, double factor, DataType wire = DataType::kFloat16);
void reduce_half_into(void* dst, const uint16_t* src, uint16_t* out, int64_t count, DataType dtype, ReduceOp op,
                      bool round_dst, DataType wire = DataType::kFloat16);
// The same with the accumulator read from `a` (float32/float64 like dst):
// dst[i] = a[i] (op) widen(src[i]), then as above. dst may be a.
void reduce_half(void* dst, const void* a, const uint16_t* src, uint16_t* out, int64_t count, DataType dtype,
                 ReduceOp op, bool round_dst, DataType wire = DataType::kFloat16);

// float32/float64 <-> bfloat16 arrays (the bf16 twins of float_to_half_n & co.).
void float_to_bfloat16_n(uint16_t* dst, const float* src, int64_t count);
void bfloat16_to_float_n(float* dst, const uint16_t* src, int64_t count);
void double_to_bfloat16_n(uint16_t* dst, const double* src, int64_t count);
void bfloat16_to_double_n(double* dst, const uint16_t* src, int64_t count);

// Whether the vectorised AVX2/F16C paths are in use on this CPU.
bool cpu_has_avx2_f16c();

}  // namespace kernels
}  // namespace horovodlite
