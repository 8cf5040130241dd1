#include "kernels/convert.h"

#include <algorithm>

#include "kernels/reduce.h"

namespace horovodlite {
namespace kernels {

void to_half_scaled_n(uint16_t* dst, const void* src, int64_t count, DataType dtype, double factor, DataType wire) {
  if (factor == 1.0) return to_half_n(dst, src, count, dtype, wire);
  constexpr int64_t kChunk = 2048;
  double scratch[kChunk];  // room for a chunk of either type
  const size_t elem = dtype_size(dtype);
  for (int64_t i = 0; i < count; i += kChunk) {
    const int64_t m = std::min(kChunk, count - i);
    scale_copy(scratch, static_cast<const char*>(src) + i * elem, m, dtype, factor);
    to_half_n(dst + i, scratch, m, dtype, wire);
  }
}

void from_half_scaled_n(void* dst, const uint16_t* src, int64_t count, DataType dtype, double factor, DataType wire) {
  from_half_n(dst, src, count, dtype, wire);
  scale_as_half(dst, count, dtype, factor, wire);
}

}  // namespace kernels
}  // namespace horovodlite
