// The API's argument checks that need nothing but the arguments: a clear error
// naming the tensor, before anything reaches other ranks.
#include "api_checks.h"

#include <climits>
#include <cmath>

#include "algorithms.h"
#include "op_util.h"

namespace horovodlite {

Status check_tensor(const std::string& name, const TensorView& t, const char* what) {
  if (!dtype_valid(static_cast<int>(t.dtype))) {
    return Status::InvalidArgument(std::string(what) + " of '" + name + "' has an unsupported dtype (" +
                                   std::to_string(static_cast<int>(t.dtype)) + ")");
  }
  if (t.shape.size() > kMaxDims) {
    return Status::InvalidArgument(std::string(what) + " of '" + name + "' has " + std::to_string(t.shape.size()) +
                                   " dimensions; at most " + std::to_string(kMaxDims) + " are supported");
  }
  // The element count and the byte size must fit in int64.
  const int64_t limit = INT64_MAX / static_cast<int64_t>(dtype_size(t.dtype));
  int64_t elements = 1;
  for (int64_t d : t.shape) {
    if (d < 0)
      return Status::InvalidArgument(std::string(what) + " of '" + name + "' has a negative dimension " +
                                     shape_string(t.shape));
    if (d > 0 && elements > limit / d) {
      return Status::InvalidArgument(std::string(what) + " of '" + name + "' is too large: shape " +
                                     shape_string(t.shape) + " overflows a 64-bit byte count");
    }
    elements *= d;
  }
  if (t.data == nullptr && t.num_elements() > 0) {
    return Status::InvalidArgument(std::string(what) + " of '" + name + "' has no data");
  }
  if (t.device < kCpuDevice) {
    return Status::InvalidArgument(std::string(what) + " of '" + name + "' has an invalid device " +
                                   std::to_string(t.device));
  }
  if (t.device != kCpuDevice) return check_device(name, t.device);
  return Status::OK();
}

Status check_scaling(const std::string& name, DataType dtype, ReduceOp op, double pre, double post) {
  if (static_cast<int>(op) > static_cast<int>(ReduceOp::kAdasum)) {
    return Status::InvalidArgument("invalid reduce op for tensor '" + name + "'");
  }
  if (dtype == DataType::kBool && (op == ReduceOp::kAverage || pre != 1.0 || post != 1.0)) {
    return Status::InvalidArgument("tensor '" + name +
                                   "' is bool: Average and scale factors are not defined for "
                                   "bool; use Sum (logical or), Min, Max or Product (logical and)");
  }
  if (!std::isfinite(pre) || !std::isfinite(post)) {
    return Status::InvalidArgument("scale factors for tensor '" + name + "' must be finite");
  }
  return Status::OK();
}

int64_t reducescatter_rows(int64_t dim0, int world_size, int rank) {
  if (world_size <= 0) return 0;
  return dim0 / world_size + (rank < dim0 % world_size ? 1 : 0);
}

Status check_allreduce_output(const std::string& name, const TensorView& input, const TensorView& output) {
  if (output.dtype != input.dtype || output.num_elements() != input.num_elements()) {
    return Status::InvalidArgument("output of allreduce '" + name + "' must have the input's dtype and size (" +
                                   dtype_name(input.dtype) + " " + shape_string(input.shape) + "), not " +
                                   dtype_name(output.dtype) + " " + shape_string(output.shape));
  }
  if (output.device != input.device) {
    return Status::InvalidArgument("output of allreduce '" + name + "' must be on the input's device");
  }
  if (overlap_partially(input.data, output.data, input.byte_size())) {
    return Status::InvalidArgument("output of allreduce '" + name +
                                   "' overlaps its input without being the same buffer (in place)");
  }
  return Status::OK();
}

}  // namespace horovodlite
