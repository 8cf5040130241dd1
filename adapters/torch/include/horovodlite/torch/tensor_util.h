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

// Throws HorovodError(kInvalidArgument) unless `tensor` is a defined CPU tensor
// of a supported dtype. `what` names the op in the message.
void check_tensor(const at::Tensor& tensor, const std::string& what);

// A view of a contiguous CPU tensor (checked). The tensor must outlive the view.
TensorView make_view(const at::Tensor& tensor);
// The same for a tensor the caller has already passed through check_tensor() and
// made contiguous (the adapter's per-op path: one set of checks per tensor).
TensorView make_checked_view(const at::Tensor& tensor);

}  // namespace torch
}  // namespace horovodlite
