#pragma once

#include "cuda/device_context.h"

namespace horovodlite {
namespace cuda {

// Reducescatter of device tensors with NCCL: ncclReduceScatter when the blocks
// are even, otherwise one grouped ncclReduce per rank. Enabled for the dtypes
// and ops NCCL can reduce.
class NcclReducescatter : public DeviceAlgorithm {
 public:
  using DeviceAlgorithm::DeviceAlgorithm;
  const char* name() const override { return "NCCL_REDUCESCATTER"; }
  bool enabled(const Response& response) const override;

 protected:
  Status enqueue(const OpArgs& args, OpOutputs* outputs) override;
};

}  // namespace cuda
}  // namespace horovodlite
