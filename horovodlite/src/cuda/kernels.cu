#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cuda/std/limits>

#include "cuda/kernels.h"

namespace horovodlite {
namespace cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocksPerTask = 1024;

struct Batch {
  CopyTask task[kMaxBatch];
};

// ---- element conversions (one overload set, so the kernels stay generic) ----
template <class T>
struct Tag {};

__device__ inline float to_math(__half x, Tag<float>) { return __half2float(x); }
__device__ inline double to_math(__half x, Tag<double>) { return static_cast<double>(__half2float(x)); }
__device__ inline float to_math(__nv_bfloat16 x, Tag<float>) { return __bfloat162float(x); }
template <class T, class M>
__device__ inline M to_math(T x, Tag<M>) {
  return static_cast<M>(x);
}

__device__ inline void from_math(float m, __half* out) { *out = __float2half_rn(m); }
__device__ inline void from_math(double m, __half* out) { *out = __double2half(m); }
__device__ inline void from_math(float m, __nv_bfloat16* out) { *out = __float2bfloat16_rn(m); }
__device__ inline void from_math(float m, float* out) { *out = m; }
__device__ inline void from_math(double m, double* out) { *out = m; }
// double -> integer: truncation toward zero, saturated, NaN -> 0 (as the host kernels).
template <class I>
__device__ inline void from_math(double p, I* out) {
  constexpr double kLo = static_cast<double>(::cuda::std::numeric_limits<I>::min());
  constexpr double kHi = static_cast<double>(::cuda::std::numeric_limits<I>::max());
  if (p != p)
    *out = 0;
  else if (p <= kLo)
    *out = ::cuda::std::numeric_limits<I>::min();
  else if (p >= kHi)
    *out = ::cuda::std::numeric_limits<I>::max();
  else
    *out = static_cast<I>(p);
}

// dst[i] = Out(M(src[i]) * factor) for the task blockIdx.y.
template <class In, class Out, class M>
__global__ void convert_kernel(Batch batch, M factor) {
  const CopyTask t = batch.task[blockIdx.y];
  const In* src = static_cast<const In*>(t.src);
  Out* dst = static_cast<Out*>(t.dst);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < t.count; i += stride) {
    from_math(to_math(src[i], Tag<M>()) * factor, dst + i);
  }
}

// A byte copy (count in bytes), 16 bytes at a time when both ends are aligned.
__global__ void copy_kernel(Batch batch) {
  const CopyTask t = batch.task[blockIdx.y];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uintptr_t align = reinterpret_cast<uintptr_t>(t.dst) | reinterpret_cast<uintptr_t>(t.src);
  int64_t done = 0;
  if ((align & 15) == 0) {
    const int64_t vecs = t.count / 16;
    const uint4* s = static_cast<const uint4*>(t.src);
    uint4* d = static_cast<uint4*>(t.dst);
    for (int64_t i = first; i < vecs; i += stride) d[i] = s[i];
    done = vecs * 16;
  }
  const uint8_t* s = static_cast<const uint8_t*>(t.src);
  uint8_t* d = static_cast<uint8_t*>(t.dst);
  for (int64_t i = done + first; i < t.count; i += stride) d[i] = s[i];
}

int blocks_for(int64_t work_items) {
  const int64_t b = (work_items + kThreads - 1) / kThreads;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(b, kMaxBlocksPerTask)));
}

// Splits tasks into launches of at most kMaxBatch; `items(t)` is the work of one task.
template <class Launch, class Items>
cudaError_t for_batches(const CopyTask* tasks, int n, Items items, Launch launch) {
  for (int first = 0; first < n; first += kMaxBatch) {
    Batch b;
    const int m = std::min(kMaxBatch, n - first);
    int64_t most = 0;
    for (int i = 0; i < m; ++i) {
      b.task[i] = tasks[first + i];
      most = std::max(most, items(b.task[i]));
    }
    if (most == 0) continue;
    launch(b, dim3(blocks_for(most), m));
    cudaError_t rc = cudaGetLastError();
    if (rc != cudaSuccess) return rc;
  }
  return cudaSuccess;
}

template <class In, class Out, class M>
cudaError_t launch_convert(const CopyTask* tasks, int n, M factor, cudaStream_t stream) {
  return for_batches(
      tasks, n, [](const CopyTask& t) { return t.count; },
      [&](const Batch& b, dim3 grid) { convert_kernel<In, Out, M><<<grid, kThreads, 0, stream>>>(b, factor); });
}

cudaError_t launch_copy(const CopyTask* tasks, int n, size_t elem, cudaStream_t stream) {
  // The kernel counts bytes; a task whose src == dst is skipped.
  CopyTask local[kMaxBatch];
  for (int first = 0; first < n; first += kMaxBatch) {
    int m = 0;
    for (int i = first; i < std::min(n, first + kMaxBatch); ++i) {
      if (tasks[i].dst == tasks[i].src || tasks[i].count == 0) continue;
      local[m++] = CopyTask{tasks[i].dst, tasks[i].src, tasks[i].count * static_cast<int64_t>(elem)};
    }
    cudaError_t rc = for_batches(
        local, m, [](const CopyTask& t) { return (t.count + 15) / 16; },
        [&](const Batch& b, dim3 grid) { copy_kernel<<<grid, kThreads, 0, stream>>>(b); });
    if (rc != cudaSuccess) return rc;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t batched_scale_copy(const CopyTask* tasks, int n, DataType dtype, double factor, cudaStream_t stream) {
  if (factor == 1.0) return launch_copy(tasks, n, dtype_size(dtype), stream);
  const float f = static_cast<float>(factor);
  switch (dtype) {
    case DataType::kUInt8:
      return launch_convert<uint8_t, uint8_t, double>(tasks, n, factor, stream);
    case DataType::kInt8:
      return launch_convert<int8_t, int8_t, double>(tasks, n, factor, stream);
    case DataType::kInt16:
      return launch_convert<int16_t, int16_t, double>(tasks, n, factor, stream);
    case DataType::kInt32:
      return launch_convert<int32_t, int32_t, double>(tasks, n, factor, stream);
    case DataType::kInt64:
      return launch_convert<int64_t, int64_t, double>(tasks, n, factor, stream);
    case DataType::kFloat16:
      return launch_convert<__half, __half, float>(tasks, n, f, stream);
    case DataType::kBFloat16:
      return launch_convert<__nv_bfloat16, __nv_bfloat16, float>(tasks, n, f, stream);
    case DataType::kFloat32:
      return launch_convert<float, float, float>(tasks, n, f, stream);
    case DataType::kFloat64:
      return launch_convert<double, double, double>(tasks, n, factor, stream);
    case DataType::kBool:
      return launch_copy(tasks, n, 1, stream);  // bool is never scaled
  }
  return cudaErrorInvalidValue;
}

cudaError_t scale(void* buf, int64_t count, DataType dtype, double factor, cudaStream_t stream) {
  if (factor == 1.0) return cudaSuccess;
  CopyTask t{buf, buf, count};
  return batched_scale_copy(&t, 1, dtype, factor, stream);
}

cudaError_t batched_to_half(const CopyTask* tasks, int n, DataType src_dtype, double factor, cudaStream_t stream) {
  if (src_dtype == DataType::kFloat32) {
    return launch_convert<float, __half, float>(tasks, n, static_cast<float>(factor), stream);
  }
  if (src_dtype == DataType::kFloat64) return launch_convert<double, __half, double>(tasks, n, factor, stream);
  return cudaErrorInvalidValue;
}

cudaError_t batched_from_half(const CopyTask* tasks, int n, DataType dst_dtype, double factor, cudaStream_t stream) {
  if (dst_dtype == DataType::kFloat32) {
    return launch_convert<__half, float, float>(tasks, n, static_cast<float>(factor), stream);
  }
  if (dst_dtype == DataType::kFloat64) return launch_convert<__half, double, double>(tasks, n, factor, stream);
  return cudaErrorInvalidValue;
}

}  // namespace cuda
}  // namespace horovodlite
