#pragma once

#include "cuda/device_context.h"

namespace horovodlite {
namespace cuda {

// Allgather of device tensors with NCCL: ncclAllGather when every rank sends the
// same number of rows, otherwise one grouped ncclBroadcast per rank.
class NcclAllgather : public DeviceAlgorithm {
 public:
  using DeviceAlgorithm::DeviceAlgorithm;
  const char* name() const override { return "NCCL_ALLGATHER"; }
  bool enabled(const Response&) const override { return true; }

 protected:
  Status enqueue(const OpArgs& args, OpOutputs* outputs) override;
};

}  // namespace cuda
}  // namespace horovodlite
