#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cuda/std/limits>
#include <vector>

#include "cuda/kernels.h"
#include "kernels/half.h"

namespace horovodlite {
namespace cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocksPerTask = 1024;

// The tasks of one launch travel as the kernel's by-value argument: up to
// kMaxBatch for small batches (a small argument keeps small launches cheap), up
// to kMaxLargeBatch (24 KiB: CUDA 12.1+ allows 32 KiB of kernel arguments) for
// large ones, so that a fused batch of hundreds of tensors is one launch.
constexpr int kMaxLargeBatch = 1024;

template <int N>
struct BatchOf {
  static constexpr int kSize = N;
  CopyTask task[N];
};

// ---- element conversions (one overload set, so the kernels stay generic) ----
template <class T>
struct Tag {};

__device__ inline float to_math(__half x, Tag<float>) { return __half2float(x); }
__device__ inline double to_math(__half x, Tag<double>) { return static_cast<double>(__half2float(x)); }
__device__ inline float to_math(__nv_bfloat16 x, Tag<float>) { return __bfloat162float(x); }
__device__ inline double to_math(__nv_bfloat16 x, Tag<double>) { return static_cast<double>(__bfloat162float(x)); }
template <class T, class M>
__device__ inline M to_math(T x, Tag<M>) {
  return static_cast<M>(x);
}

__device__ inline void from_math(float m, __half* out) { *out = __float2half_rn(m); }
__device__ inline void from_math(double m, __half* out) { *out = __double2half(m); }
__device__ inline void from_math(float m, __nv_bfloat16* out) { *out = __float2bfloat16_rn(m); }
__device__ inline void from_math(double m, __nv_bfloat16* out) { *out = __double2bfloat16(m); }
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

// kVec elements of T loaded or stored at once (16 bytes of the narrower type).
template <class T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

template <class In, class Out>
struct VecWidth {
  static constexpr int value = static_cast<int>(16 / (sizeof(In) < sizeof(Out) ? sizeof(In) : sizeof(Out)));
};

// dst[i] = Out(M(src[i]) * factor) for the task blockIdx.y. Vectorised (16 bytes
// of the narrower type per load or store) when both ends are aligned for it.
template <class In, class Out, class M, class Batch>
__global__ void convert_kernel(Batch batch, M factor) {
  constexpr int kVec = VecWidth<In, Out>::value;
  const CopyTask t = batch.task[blockIdx.y];
  const In* src = static_cast<const In*>(t.src);
  Out* dst = static_cast<Out*>(t.dst);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if (reinterpret_cast<uintptr_t>(src) % sizeof(Vec<In, kVec>) == 0 &&
      reinterpret_cast<uintptr_t>(dst) % sizeof(Vec<Out, kVec>) == 0) {
    const int64_t vecs = t.count / kVec;
    const auto* s = reinterpret_cast<const Vec<In, kVec>*>(src);
    auto* d = reinterpret_cast<Vec<Out, kVec>*>(dst);
    for (int64_t i = first; i < vecs; i += stride) {
      const Vec<In, kVec> in = s[i];
      Vec<Out, kVec> out;
#pragma unroll
      for (int k = 0; k < kVec; ++k) from_math(to_math(in.v[k], Tag<M>()) * factor, out.v + k);
      d[i] = out;
    }
    done = vecs * kVec;
  }
  for (int64_t i = done + first; i < t.count; i += stride) {
    from_math(to_math(src[i], Tag<M>()) * factor, dst + i);
  }
}

// A byte copy (count in bytes), 16 bytes at a time when both ends are aligned.
template <class Batch>
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

// Splits tasks into launches of at most Batch::kSize; `items(t)` is the work of
// one task (in a grid's x dimension, the largest task's).
template <class Batch, class Launch, class Items>
cudaError_t for_batches_of(const CopyTask* tasks, int n, Items items, Launch launch) {
  Batch b;
  for (int first = 0; first < n; first += Batch::kSize) {
    const int m = std::min(Batch::kSize, n - first);
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

// One launch for up to kMaxLargeBatch tasks (the small argument for small batches).
template <class Launch, class Items>
cudaError_t for_batches(const CopyTask* tasks, int n, Items items, Launch launch) {
  if (n <= kMaxBatch) return for_batches_of<BatchOf<kMaxBatch>>(tasks, n, items, launch);
  return for_batches_of<BatchOf<kMaxLargeBatch>>(tasks, n, items, launch);
}

template <class In, class Out, class M>
cudaError_t launch_convert(const CopyTask* tasks, int n, M factor, cudaStream_t stream) {
  return for_batches(
      tasks, n, [](const CopyTask& t) { return (t.count + VecWidth<In, Out>::value - 1) / VecWidth<In, Out>::value; },
      [&](const auto& b, dim3 grid) { convert_kernel<In, Out, M><<<grid, kThreads, 0, stream>>>(b, factor); });
}

cudaError_t launch_copy(const CopyTask* tasks, int n, size_t elem, cudaStream_t stream) {
  // The kernel counts bytes; a task whose src == dst is skipped.
  std::vector<CopyTask> local;
  local.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    if (tasks[i].dst == tasks[i].src || tasks[i].count == 0) continue;
    local.push_back(CopyTask{tasks[i].dst, tasks[i].src, tasks[i].count * static_cast<int64_t>(elem)});
  }
  return for_batches(
      local.data(), static_cast<int>(local.size()), [](const CopyTask& t) { return (t.count + 15) / 16; },
      [&](const auto& b, dim3 grid) { copy_kernel<<<grid, kThreads, 0, stream>>>(b); });
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
    case DataType::kFloat16:  // the factor rounded to half first, as Horovod's CUDA kernels (kernels/half.h)
      return launch_convert<__half, __half, float>(tasks, n, kernels::device_half_factor(factor), stream);
    case DataType::kBFloat16:
      return launch_convert<__nv_bfloat16, __nv_bfloat16, float>(tasks, n, kernels::device_bfloat16_factor(factor),
                                                                 stream);
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

namespace {

template <class H>
cudaError_t to_16bit(const CopyTask* tasks, int n, DataType src_dtype, double factor, cudaStream_t stream) {
  if (src_dtype == DataType::kFloat32) {
    return launch_convert<float, H, float>(tasks, n, static_cast<float>(factor), stream);
  }
  if (src_dtype == DataType::kFloat64) return launch_convert<double, H, double>(tasks, n, factor, stream);
  return cudaErrorInvalidValue;
}

template <class H>
cudaError_t from_16bit(const CopyTask* tasks, int n, DataType dst_dtype, double factor, cudaStream_t stream) {
  if (dst_dtype == DataType::kFloat32) {
    return launch_convert<H, float, float>(tasks, n, static_cast<float>(factor), stream);
  }
  if (dst_dtype == DataType::kFloat64) return launch_convert<H, double, double>(tasks, n, factor, stream);
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t batched_to_half(const CopyTask* tasks, int n, DataType src_dtype, double factor, cudaStream_t stream,
                            DataType wire) {
  if (wire == DataType::kBFloat16) return to_16bit<__nv_bfloat16>(tasks, n, src_dtype, factor, stream);
  if (wire == DataType::kFloat16) return to_16bit<__half>(tasks, n, src_dtype, factor, stream);
  return cudaErrorInvalidValue;
}

cudaError_t batched_from_half(const CopyTask* tasks, int n, DataType dst_dtype, double factor, cudaStream_t stream,
                              DataType wire) {
  if (wire == DataType::kBFloat16) return from_16bit<__nv_bfloat16>(tasks, n, dst_dtype, factor, stream);
  if (wire == DataType::kFloat16) return from_16bit<__half>(tasks, n, dst_dtype, factor, stream);
  return cudaErrorInvalidValue;
}

}  // namespace cuda
}  // namespace horovodlite
