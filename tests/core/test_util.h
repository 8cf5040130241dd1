// Helpers for the core's multi-process tests: typed buffers for every dtype,
// deterministic per-rank values, and conversions through double.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "../dtype_values.h"
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

  double get(int64_t i) const { return load_as_double(bytes_.data() + i * dtype_size(dtype_), dtype_); }
  void set(int64_t i, double v) { store_from_double(bytes_.data() + i * dtype_size(dtype_), dtype_, v); }
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
