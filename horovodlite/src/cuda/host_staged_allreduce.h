// Device allreduce through the host: the fused device buffer is copied to pinned
// memory, the core's stream (only) is synchronised, the host allreduce (MPI or
// the ring, as chosen for the host) runs and the result is copied back. Used
// with GPU_OPERATIONS=mpi and for reductions NCCL cannot do (int16); always
// enabled, so it ends the device allreduce list.
#pragma once

#include <functional>

#include "cuda/buffers.h"
#include "cuda/device_allreduce.h"

namespace horovodlite {
namespace cuda {

// In-place allreduce of a host buffer with the host algorithm chosen for the message.
using HostAllreduceFn = std::function<Status(void* buffer, int64_t count, DataType dtype, ReduceOp op)>;

class HostStagedAllreduce : public DeviceAllreduce {
 public:
  HostStagedAllreduce(std::shared_ptr<DeviceContext> ctx, HostAllreduceFn host)
      : DeviceAllreduce(std::move(ctx)), host_(std::move(host)) {}
  const char* name() const override { return "HOST_STAGED_ALLREDUCE"; }
  bool accepts(DataType, ReduceOp, int64_t) const override { return true; }
  Status reduce(void* buffer, int64_t count, DataType dtype, ReduceOp op) override;

 private:
  HostAllreduceFn host_;
  PinnedBuffer stage_;
};

}  // namespace cuda
}  // namespace horovodlite
