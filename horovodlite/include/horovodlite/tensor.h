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
// event recorded on the framework's stream), or, on a handle, that the device work
// of a completed op has finished (see Handle::completion_event()). Host tensors
// need none.
class ReadyEvent {
 public:
  virtual ~ReadyEvent() = default;
  // True once the event has completed. Never blocks.
  virtual bool ready() const = 0;
  // The cudaEvent_t behind this event (as void*, so that this header needs no CUDA
  // headers), or nullptr. The core makes its stream wait on it with
  // cudaStreamWaitEvent, and a consumer stream can wait on a handle's completion
  // event the same way: ordering on the device, no host synchronisation.
  virtual void* cuda_event() const { return nullptr; }
};
using ReadyEventPtr = std::shared_ptr<ReadyEvent>;

}  // namespace horovodlite
