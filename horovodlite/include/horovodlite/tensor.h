// The framework-neutral view of a tensor that the core works on. The core never
// owns tensor memory: the caller keeps the memory alive until the op's handle
// completes. Outputs whose size is known only after negotiation (allgather,
// alltoall, reducescatter) are obtained through an OutputAllocator.
#pragma once

#include <functional>
#include <memory>

#include "horovodlite/common.h"

namespace horovodlite {

// A dense, contiguous (row-major) tensor.
struct TensorView {
  void* data = nullptr;
  DataType dtype = DataType::kFloat32;
  Shape shape;
  int device = kCpuDevice;

  int64_t num_elements() const { return horovodlite::num_elements(shape); }
  size_t byte_size() const { return static_cast<size_t>(num_elements()) * dtype_size(dtype); }
};

// Called on the background thread once the output shape is known. Must set
// out->data to contiguous memory for `shape` elements of the input's dtype/device,
// valid until the handle completes.
using OutputAllocator = std::function<Status(const Shape& shape, TensorView* out)>;

// Signals that the producer of a device tensor has finished writing it (a CUDA
// event recorded on the framework's stream). Host tensors need none.
class ReadyEvent {
 public:
  virtual ~ReadyEvent() = default;
  virtual bool ready() const = 0;
};

}  // namespace horovodlite
