// Any device op through the host path: inputs are staged to pinned memory (the
// core's stream only is synchronised), the host algorithm for the op runs on host
// views of the same entries, and the results go back to the device. Ends the
// device lists of allgather, broadcast, alltoall and reducescatter (used with
// GPU_OPERATIONS=mpi, and where NCCL cannot reduce the dtype).
#pragma once

#include <functional>

#include "cuda/device_context.h"

namespace horovodlite {
namespace cuda {

// Runs a response (on host views) with the host algorithm chosen for it.
using HostRunFn = std::function<OpResult(const OpArgs& args)>;

class HostStaged : public DeviceAlgorithm {
 public:
  HostStaged(std::shared_ptr<DeviceContext> ctx, HostRunFn host)
      : DeviceAlgorithm(std::move(ctx)), host_(std::move(host)) {}
  const char* name() const override { return "HOST_STAGED"; }
  bool enabled(const Response&) const override { return true; }

 protected:
  Status enqueue(const OpArgs& args, OpOutputs* outputs) override;

 private:
  HostRunFn host_;
};

}  // namespace cuda
}  // namespace horovodlite
