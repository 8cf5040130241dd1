// Helpers for the core's multi-process tests: typed buffers for every dtype,
// deterministic per-rank values, and conversions through double.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "horovodlite/horovodlite.h"
#include "kernels/reduce.h"

namespace hvl_test {

using namespace horovodlite;

inline const std::vector<DataType>& all_dtypes() {
  static const std::vector<DataType> v = {
      DataType::kUInt8,   DataType::kInt8,     DataType::kInt16,   DataType::kInt32,   DataType::kInt64,
      DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64, DataType::kBool};
  return v;
}

// A host buffer of n elements of dtype, readable and writable through double.
class Buffer {
 public:
  Buffer(DataType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
    bytes_.assign(std::max<size_t>(num_elements(shape_) * dtype_size(dtype_), 1), 0);
  }
  int64_t size() const { return num_elements(shape_); }
  DataType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  void* data() { return bytes_.data(); }
  TensorView view() { return TensorView{bytes_.data(), dtype_, shape_, kCpuDevice}; }

  double get(int64_t i) const {
    const void* p = bytes_.data() + i * dtype_size(dtype_);
    switch (dtype_) {
      case DataType::kUInt8:
        return *static_cast<const uint8_t*>(p);
      case DataType::kInt8:
        return *static_cast<const int8_t*>(p);
      case DataType::kInt16:
        return *static_cast<const int16_t*>(p);
      case DataType::kInt32:
        return *static_cast<const int32_t*>(p);
      case DataType::kInt64:
        return static_cast<double>(*static_cast<const int64_t*>(p));
      case DataType::kFloat16:
        return kernels::half_to_float(*static_cast<const uint16_t*>(p));
      case DataType::kBFloat16:
        return kernels::bfloat16_to_float(*static_cast<const uint16_t*>(p));
      case DataType::kFloat32:
        return *static_cast<const float*>(p);
      case DataType::kFloat64:
        return *static_cast<const double*>(p);
      case DataType::kBool:
        return *static_cast<const uint8_t*>(p) ? 1.0 : 0.0;
    }
    return 0;
  }
  void set(int64_t i, double v) {
    void* p = bytes_.data() + i * dtype_size(dtype_);
    switch (dtype_) {
      case DataType::kUInt8:
        *static_cast<uint8_t*>(p) = static_cast<uint8_t>(v);
        break;
      case DataType::kInt8:
        *static_cast<int8_t*>(p) = static_cast<int8_t>(v);
        break;
      case DataType::kInt16:
        *static_cast<int16_t*>(p) = static_cast<int16_t>(v);
        break;
      case DataType::kInt32:
        *static_cast<int32_t*>(p) = static_cast<int32_t>(v);
        break;
      case DataType::kInt64:
        *static_cast<int64_t*>(p) = static_cast<int64_t>(v);
        break;
      case DataType::kFloat16:
        *static_cast<uint16_t*>(p) = kernels::float_to_half(static_cast<float>(v));
        break;
      case DataType::kBFloat16:
        *static_cast<uint16_t*>(p) = kernels::float_to_bfloat16(static_cast<float>(v));
        break;
      case DataType::kFloat32:
        *static_cast<float*>(p) = static_cast<float>(v);
        break;
      case DataType::kFloat64:
        *static_cast<double*>(p) = v;
        break;
      case DataType::kBool:
        *static_cast<uint8_t*>(p) = v != 0.0;
        break;
    }
  }
  bool bitwise_equal(const Buffer& o) const { return bytes_ == o.bytes_; }

 private:
  DataType dtype_;
  Shape shape_;
  std::vector<uint8_t> bytes_;
};

// An OutputAllocator that stores the result in *out.
inline OutputAllocator allocate_into(std::unique_ptr<Buffer>* out, DataType dtype) {
  return [out, dtype](const Shape& shape, TensorView* view) {
    *out = std::make_unique<Buffer>(dtype, shape);
    *view = (*out)->view();
    return Status::OK();
  };
}

// Tolerance for comparing a reduced value with its exact expectation.
inline double tolerance(DataType dtype, double expected) {
  switch (dtype) {
    case DataType::kFloat16:
      return 1e-2 * std::max(1.0, std::abs(expected));
    case DataType::kBFloat16:
      return 1e-2 * std::max(1.0, std::abs(expected));
    case DataType::kFloat32:
      return 1e-5 * std::max(1.0, std::abs(expected));
    case DataType::kFloat64:
      return 1e-12 * std::max(1.0, std::abs(expected));
    default:
      return 0.0;
  }
}

#define HVL_ASSERT_OK(expr)                 \
  do {                                      \
    ::horovodlite::Status s_ = (expr);      \
    ASSERT_TRUE(s_.ok()) << s_.to_string(); \
  } while (0)

// Restarts horovodlite on every rank with environment overrides (name=value;
// an empty value unsets the variable).
inline Status restart_with(const std::vector<std::pair<std::string, std::string>>& env) {
  Status s = shutdown();
  if (!s.ok()) return s;
  for (const auto& kv : env) {
    if (kv.second.empty())
      unsetenv(kv.first.c_str());
    else
      setenv(kv.first.c_str(), kv.second.c_str(), 1);
  }
  return init();
}

}  // namespace hvl_test
