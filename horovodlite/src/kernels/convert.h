// fp16 compression's conversions on the host: a float32 or float64 tensor into
// the IEEE binary16 buffer it is reduced in, and the result back, with the op's
// prescale and postscale. The host ops that reduce an fp16 copy
// (ops/host_allreduce.cc, ops/adasum.cc) pack and unpack through these, so the
// order of scaling and rounding is written once.
#pragma once

#include <cstdint>

#include "horovodlite/common.h"

namespace horovodlite {
namespace kernels {

// dst[i] = half(src[i] * factor), src float32 or float64. The scaling comes
// before the conversion, so that a predivide factor can keep large values
// within the fp16 range. Needs no allocation (the scaled values go through a
// chunk on the stack).
void to_half_scaled_n(uint16_t* dst, const void* src, int64_t count, DataType dtype, double factor,
                      DataType wire = DataType::kFloat16);

// dst[i] = widen(half(widen(src[i]) * factor)), dst float32 or float64: the
// factor is applied in fp16 precision, as Horovod scales its fp16 buffers, so
// the result is an fp16 value (kernels/reduce.h, scale_as_half). `wire`:
// kFloat16 or kBFloat16 (bf16 compression), as in kernels/reduce.h.
void from_half_scaled_n(void* dst, const uint16_t* src, int64_t count, DataType dtype, double factor,
                        DataType wire = DataType::kFloat16);

}  // namespace kernels
}  // namespace horovodlite
