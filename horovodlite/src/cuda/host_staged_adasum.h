// Adasum of device tensors, host-staged: the inputs are copied to pinned host
// memory, the host Adasum (ops/adasum.h) runs on them with the tensors'
// boundaries, and the results go back to the device. Heads the device
// allreduce list and is enabled for Adasum responses only (NCCL has no Adasum).
#pragma once

#include "cuda/host_staged.h"

namespace horovodlite {
namespace cuda {

class HostStagedAdasum : public HostStaged {
 public:
  using HostStaged::HostStaged;
  const char* name() const override { return "HOST_STAGED_ADASUM"; }
  bool enabled(const Response& response) const override { return response.reduce_op == ReduceOp::kAdasum; }
};

}  // namespace cuda
}  // namespace horovodlite
