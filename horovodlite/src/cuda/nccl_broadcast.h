#pragma once

#include "cuda/device_context.h"

namespace horovodlite {
namespace cuda {

// ncclBroadcast of a device tensor from the root.
class NcclBroadcast : public DeviceAlgorithm {
 public:
  using DeviceAlgorithm::DeviceAlgorithm;
  const char* name() const override { return "NCCL_BROADCAST"; }
  bool enabled(const Response&) const override { return true; }

 protected:
  Status enqueue(const OpArgs& args, OpOutputs* outputs) override;
};

}  // namespace cuda
}  // namespace horovodlite
