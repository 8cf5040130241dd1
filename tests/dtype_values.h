// Element access through double for every horovodlite dtype, shared by the
// core tests (tests/core/test_util.h) and the GPU kernel tests.
#pragma once

#include <cstdint>

#include "horovodlite/common.h"
#include "kernels/reduce.h"

namespace hvl_test {

// The element at p (of `dtype`) as a double.
inline double load_as_double(const void* p, horovodlite::DataType dtype) {
  using horovodlite::DataType;
  switch (dtype) {
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
      return horovodlite::kernels::half_to_float(*static_cast<const uint16_t*>(p));
    case DataType::kBFloat16:
      return horovodlite::kernels::bfloat16_to_float(*static_cast<const uint16_t*>(p));
    case DataType::kFloat32:
      return *static_cast<const float*>(p);
    case DataType::kFloat64:
      return *static_cast<const double*>(p);
    case DataType::kBool:
      return *static_cast<const uint8_t*>(p) ? 1.0 : 0.0;
  }
  return 0;
}

// Stores v at p as `dtype` (integers truncate; bool: v != 0).
inline void store_from_double(void* p, horovodlite::DataType dtype, double v) {
  using horovodlite::DataType;
  switch (dtype) {
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
      *static_cast<uint16_t*>(p) = horovodlite::kernels::float_to_half(static_cast<float>(v));
      break;
    case DataType::kBFloat16:
      *static_cast<uint16_t*>(p) = horovodlite::kernels::float_to_bfloat16(static_cast<float>(v));
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

}  // namespace hvl_test
