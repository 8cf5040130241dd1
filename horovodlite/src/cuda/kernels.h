// CUDA kernels of the device path: batched copies into and out of the fusion
// buffer with pre/post scaling, and the fp16 compression casts. Each call is one
// kernel launch per up to 1024 tensors (vectorised loads and stores), enqueued on `stream`; nothing synchronises.
// Semantics match the host kernels (kernels/reduce.h): float32 scales in float,
// float64 and integers in double (integers truncated toward zero and saturated,
// NaN -> 0), fp16/bf16 through float by the factor rounded to fp16/bf16 first (Horovod's
// CUDA semantics: kernels::device_half_factor); factor 1 with equal types is a plain copy.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "horovodlite/common.h"
#include "ops/fusion.h"

namespace horovodlite {
namespace cuda {

// One tensor of a batch: `count` elements from src to dst (device pointers).
using CopyTask = ::horovodlite::CopyTask;

// Tasks per kernel launch for small batches (they travel as the kernel's by-value
// argument); larger batches go in launches of up to 1024 tasks (kernels.cu).
constexpr int kMaxBatch = 64;

// dst = src * factor for every task, all of `dtype`. dst == src (in place) is allowed.
cudaError_t batched_scale_copy(const CopyTask* tasks, int n, DataType dtype, double factor, cudaStream_t stream);

// In place: buf = buf * factor.
cudaError_t scale(void* buf, int64_t count, DataType dtype, double factor, cudaStream_t stream);

// fp16/bf16 compression: dst (`wire`: kFloat16 or kBFloat16) = half(src * factor),
// src float32 or float64 (scaled in its own precision before the conversion, so a
// prescale can keep values in range).
cudaError_t batched_to_half(const CopyTask* tasks, int n, DataType src_dtype, double factor, cudaStream_t stream,
                            DataType wire = DataType::kFloat16);
// dst (float32 or float64) = float(src fp16 or bf16) * factor, scaled in dst's precision.
cudaError_t batched_from_half(const CopyTask* tasks, int n, DataType dst_dtype, double factor, cudaStream_t stream,
                              DataType wire = DataType::kFloat16);

}  // namespace cuda
}  // namespace horovodlite
