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

}  // namespace horovodlite
