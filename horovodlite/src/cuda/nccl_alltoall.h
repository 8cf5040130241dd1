#pragma once

#include "cuda/device_context.h"

namespace horovodlite {
namespace cuda {

// Alltoall of device tensors: the splits are exchanged over MPI, then one grouped
// ncclSend/ncclRecv per peer (and a device copy to self).
class NcclAlltoall : public DeviceAlgorithm {
 public:
  using DeviceAlgorithm::DeviceAlgorithm;
  const char* name() const override { return "NCCL_ALLTOALL"; }
  bool enabled(const Response&) const override { return true; }

 protected:
  Status enqueue(const OpArgs& args, OpOutputs* outputs) override;
};

}  // namespace cuda
}  // namespace horovodlite
