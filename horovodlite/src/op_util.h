// Small shape, scaling and buffer rules shared by the executors and the ring.
#pragma once

#include <cstdint>

#include "horovodlite/common.h"
#include "message.h"

namespace horovodlite {

// Elements in one row of dim 0 (the product of the other dimensions).
inline int64_t row_elements(const Shape& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

// `shape` with dim 0 replaced (a 0-d shape counts as [1]).
inline Shape with_dim0(const Shape& shape, int64_t dim0) {
  Shape s = shape.empty() ? Shape{1} : shape;
  s[0] = dim0;
  return s;
}

// Whether two buffers of `bytes` bytes overlap without being the same buffer
// (the one layout an out-of-place kernel cannot take).
inline bool overlap_partially(const void* a, const void* b, int64_t bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  const auto n = static_cast<uintptr_t>(bytes);
  return x != y && x < y + n && y < x + n;
}

// `p` advanced by `bytes`.
inline void* byte_offset(void* p, int64_t bytes) { return static_cast<char*>(p) + bytes; }
inline const void* byte_offset(const void* p, int64_t bytes) { return static_cast<const char*>(p) + bytes; }

// Average is a Sum followed by a postscale of 1/size.
inline double effective_postscale(const Response& r, int size) {
  return r.reduce_op == ReduceOp::kAverage ? r.postscale / size : r.postscale;
}
inline ReduceOp effective_op(ReduceOp op) { return op == ReduceOp::kAverage ? ReduceOp::kSum : op; }

// An allreduce whose data travels as 16-bit floats (Compression::kFp16 and
// kBf16 apply to float32 and float64 only; other dtypes travel as they are).
inline bool wire16_compressed(const Response& r) {
  return (r.compression == Compression::kFp16 || r.compression == Compression::kBf16) &&
         (r.dtype == DataType::kFloat32 || r.dtype == DataType::kFloat64);
}
// The 16-bit type a compressed allreduce travels in: kFloat16 or kBFloat16.
inline DataType wire16_type(const Response& r) {
  return r.compression == Compression::kBf16 ? DataType::kBFloat16 : DataType::kFloat16;
}
// The dtype an allreduce's algorithm reduces: fp16 or bf16 when compressed.
inline DataType wire_dtype(const Response& r) { return wire16_compressed(r) ? wire16_type(r) : r.dtype; }
// Elements of a (possibly fused) allreduce: the sum over its tensors.
inline int64_t total_elements(const Response& r) {
  int64_t n = 0;
  for (int64_t s : r.tensor_sizes) n += s;
  return n;
}

}  // namespace horovodlite
