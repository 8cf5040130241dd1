// Element-wise kernels for the host data path: reductions for every dtype and
// op, scaling, and fp16/bf16 conversion. Each entry point picks an AVX2/F16C
// implementation at run time when the CPU has one, else a portable one.
#pragma once

#include <cstdint>

#include "horovodlite/common.h"

namespace horovodlite {
namespace kernels {

// dst[i] = dst[i] (op) src[i] for i < count. Average reduces as Sum (the division
// is a postscale). bool: Sum/Max = logical or, Min/Product = logical and.
void reduce_into(void* dst, const void* src, int64_t count, DataType dtype, ReduceOp op);

// buf[i] *= factor. Integers: the product is computed in double and truncated
// toward zero. bool: unsupported (the caller rejects scaling of bool).
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

// Whether the vectorised AVX2/F16C paths are in use on this CPU.
bool cpu_has_avx2_f16c();

}  // namespace kernels
}  // namespace horovodlite
