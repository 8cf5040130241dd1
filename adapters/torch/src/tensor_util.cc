#include "horovodlite/torch/tensor_util.h"

#include <sstream>

#include "horovodlite/torch/error.h"

namespace horovodlite {
namespace torch {
namespace {

bool lookup(at::ScalarType type, DataType* out) {
  switch (type) {
    case at::kByte:
      *out = DataType::kUInt8;
      return true;
    case at::kChar:
      *out = DataType::kInt8;
      return true;
    case at::kShort:
      *out = DataType::kInt16;
      return true;
    case at::kInt:
      *out = DataType::kInt32;
      return true;
    case at::kLong:
      *out = DataType::kInt64;
      return true;
    case at::kHalf:
      *out = DataType::kFloat16;
      return true;
    case at::kBFloat16:
      *out = DataType::kBFloat16;
      return true;
    case at::kFloat:
      *out = DataType::kFloat32;
      return true;
    case at::kDouble:
      *out = DataType::kFloat64;
      return true;
    case at::kBool:
      *out = DataType::kBool;
      return true;
    default:
      return false;
  }
}

}  // namespace

DataType to_data_type(at::ScalarType type) {
  DataType out;
  if (!lookup(type, &out)) {
    throw HorovodError(StatusCode::kInvalidArgument,
                       std::string("horovodlite does not support tensors of type ") + c10::toString(type) +
                           " (supported: uint8, int8, int16, int32, int64, float16, bfloat16, float32, "
                           "float64, bool)");
  }
  return out;
}

DataType check_tensor(const at::Tensor& tensor, const std::string& what) {
  // Messages are built only on failure: this runs for every tensor of every op.
  if (!tensor.defined()) check_argument(false, what + ": the tensor is undefined");
#ifdef HVL_TORCH_CUDA
  const bool supported_device = tensor.device().is_cpu() || tensor.device().is_cuda();
  const char* supported = "CPU and CUDA tensors";
#else
  const bool supported_device = tensor.device().is_cpu();
  const char* supported =
      "CPU tensors (this build has no CUDA path: it needs horovodlite built with CUDA and a "
      "LibTorch with CUDA)";
#endif
  if (!supported_device) {
    std::ostringstream msg;
    msg << what << ": the LibTorch adapter supports " << supported << " (got a tensor on " << tensor.device() << ")";
    throw HorovodError(StatusCode::kUnimplemented, msg.str());
  }
  if (tensor.is_sparse()) check_argument(false, what + ": sparse tensors are not supported");
  if (tensor.is_quantized()) check_argument(false, what + ": quantized tensors are not supported");
  return to_data_type(tensor.scalar_type());
}

TensorView make_view(const at::Tensor& tensor) {
  const DataType dtype = check_tensor(tensor, "make_view");
  check_argument(tensor.is_contiguous(), "make_view: the tensor must be contiguous");
  return make_checked_view(tensor, dtype);
}

TensorView make_checked_view(const at::Tensor& tensor, DataType dtype) {
  TensorView view;
  view.data = tensor.data_ptr();
  view.dtype = dtype;
  view.shape = tensor.sizes().vec();
  view.device = tensor.device().is_cuda() ? static_cast<int>(tensor.device().index()) : kCpuDevice;
  return view;
}

}  // namespace torch
}  // namespace horovodlite
