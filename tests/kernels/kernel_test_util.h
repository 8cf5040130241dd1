// Helpers shared by the kernel tests: element sizes, random inputs with the
// awkward values of each dtype, and an element-wise comparison in which two
// NaNs are equal (NaN payloads may legitimately differ between code paths).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "horovodlite/common.h"
#include "kernels/half.h"

namespace horovodlite {
namespace kernels {
namespace testing {

inline const char* op_label(ReduceOp op) {
  static const char* kNames[] = {"average", "sum", "min", "max", "product"};
  return kNames[static_cast<int>(op)];
}

inline std::vector<DataType> all_types() {
  std::vector<DataType> v;
  for (int i = 0; i < kNumDataTypes; ++i) v.push_back(static_cast<DataType>(i));
  return v;
}

inline std::vector<ReduceOp> all_ops() {
  return {ReduceOp::kAverage, ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};
}

// A byte buffer whose data() is 64-byte aligned plus `skew` elements, so the
// kernels see pointers that are element-aligned but not vector-aligned.
class SkewedBuffer {
 public:
  SkewedBuffer(int64_t count, size_t esize, int skew)
      : storage_(static_cast<size_t>(count + skew + 16) * esize + 128), esize_(esize) {
    uintptr_t base = reinterpret_cast<uintptr_t>(storage_.data());
    offset_ = ((64 - base % 64) % 64) + static_cast<size_t>(skew) * esize;
  }
  uint8_t* data() { return storage_.data() + offset_; }
  uint8_t* end_guard(int64_t count) { return data() + count * esize_; }

 private:
  std::vector<uint8_t> storage_;
  size_t esize_;
  size_t offset_;
};

inline void fill_random(void* out, int64_t count, DataType t, std::mt19937_64& rng) {
  uint8_t* p = static_cast<uint8_t*>(out);
  std::uniform_real_distribution<double> u(-4.0, 4.0);
  std::uniform_int_distribution<int> special(0, 63);
  const double kSpecial[] = {NAN, INFINITY, -INFINITY, -0.0, 0.0, 1e-40, 5e-8, -3e-5, 70000.0, 1e300};
  for (int64_t i = 0; i < count; ++i) {
    const int sp = special(rng);
    const double v = sp < 10 ? kSpecial[sp] : u(rng);
    switch (t) {
      case DataType::kBool:
        p[i] = static_cast<uint8_t>(rng() & 1u);
        break;
      case DataType::kFloat16:
      case DataType::kBFloat16: {
        uint16_t h = static_cast<uint16_t>(rng());  // every bit pattern, NaN and inf included
        std::memcpy(p + 2 * i, &h, 2);
        break;
      }
      case DataType::kFloat32: {
        float f = static_cast<float>(v);
        std::memcpy(p + 4 * i, &f, 4);
        break;
      }
      case DataType::kFloat64:
        std::memcpy(p + 8 * i, &v, 8);
        break;
      default: {
        uint64_t r = rng();
        std::memcpy(p + dtype_size(t) * i, &r, dtype_size(t));
      }
    }
  }
}

inline bool is_nan_elem(const uint8_t* p, DataType t) {
  switch (t) {
    case DataType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return (h & 0x7fffu) > 0x7c00u;
    }
    case DataType::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return (h & 0x7fffu) > 0x7f80u;
    }
    case DataType::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return std::isnan(f);
    }
    case DataType::kFloat64: {
      double d;
      std::memcpy(&d, p, 8);
      return std::isnan(d);
    }
    default:
      return false;
  }
}

// Index of the first element that differs (bitwise, NaN == NaN), or -1.
inline int64_t first_mismatch(const void* a, const void* b, int64_t count, DataType t) {
  const size_t es = dtype_size(t);
  const uint8_t* pa = static_cast<const uint8_t*>(a);
  const uint8_t* pb = static_cast<const uint8_t*>(b);
  for (int64_t i = 0; i < count; ++i) {
    if (std::memcmp(pa + i * es, pb + i * es, es) == 0) continue;
    if (is_nan_elem(pa + i * es, t) && is_nan_elem(pb + i * es, t)) continue;
    return i;
  }
  return -1;
}

// The definition of reduce_half_into with a 16-bit wire (kFloat16 or kBFloat16),
// one element at a time in the buffer's type T: d = d op decode(s), encoded to
// out when given, d rounded through the wire when `round`.
template <class T>
void wire_reference(T* d, const uint16_t* s, uint16_t* out, int64_t n, ReduceOp op, bool round, DataType wire) {
  const bool bf = wire == DataType::kBFloat16;
  auto decode = [bf](uint16_t h) { return bf ? detail::bfloat16_to_float_scalar(h) : detail::half_to_float_scalar(h); };
  for (int64_t i = 0; i < n; ++i) {
    const T a = d[i];
    const T b = static_cast<T>(decode(s[i]));
    T r;
    switch (op) {
      case ReduceOp::kMin:
        r = (b < a || b != b) ? b : a;
        break;
      case ReduceOp::kMax:
        r = (b > a || b != b) ? b : a;
        break;
      case ReduceOp::kProduct:
        r = a * b;
        break;
      default:
        r = a + b;
    }
    uint16_t h;
    if constexpr (sizeof(T) == 4) {
      h = bf ? detail::float_to_bfloat16_scalar(r) : detail::float_to_half_scalar(r);
    } else {
      h = bf ? detail::double_to_bfloat16_scalar(r) : detail::double_to_half_scalar(r);
    }
    d[i] = round ? static_cast<T>(decode(h)) : r;
    if (out) out[i] = h;
  }
}

}  // namespace testing
}  // namespace kernels
}  // namespace horovodlite
