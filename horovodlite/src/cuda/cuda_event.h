// A CUDA event as the core's ReadyEvent: the completion event of a device op,
// recorded on the core's stream and exposed on the op's handles.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "horovodlite/common.h"
#include "horovodlite/tensor.h"

namespace horovodlite {
namespace cuda {

class CudaEvent : public ReadyEvent {
 public:
  // Creates an event (timing disabled) and records it on `stream`.
  static Status record(cudaStream_t stream, std::shared_ptr<CudaEvent>* out);
  ~CudaEvent() override;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  bool ready() const override { return cudaEventQuery(event_) != cudaErrorNotReady; }
  void* cuda_event() const override { return event_; }
  cudaEvent_t get() const { return event_; }

 private:
  CudaEvent() = default;
  cudaEvent_t event_ = nullptr;
};

}  // namespace cuda
}  // namespace horovodlite
