// at::Tensor <-> core TensorView: dtype mapping and the checks every collective
// makes before handing a tensor to the core.
#pragma once

#include <ATen/ATen.h>

#include <string>

#include "horovodlite/common.h"
#include "horovodlite/tensor.h"

namespace horovodlite {
namespace torch {

// Throws HorovodError(kInvalidArgument) for scalar types the core does not support.
DataType to_data_type(at::ScalarType type);

// Throws HorovodError unless `tensor` is a defined, dense tensor of a supported
// dtype on the CPU (or, in a CUDA build, a GPU): kInvalidArgument, or
// kUnimplemented for another device. `what` names the op in the message.
// Returns the dtype in the core's terms, for make_checked_view().
DataType check_tensor(const at::Tensor& tensor, const std::string& what);

// A view of a contiguous CPU tensor (checked). The tensor must outlive the view.
TensorView make_view(const at::Tensor& tensor);
// The same for a contiguous tensor whose dtype check_tensor() has returned (the
// adapter's per-op path: one check and one dtype conversion per tensor; a
// contiguous copy or a new tensor with the same options has the same dtype).
TensorView make_checked_view(const at::Tensor& tensor, DataType dtype);

}  // namespace torch
}  // namespace horovodlite
