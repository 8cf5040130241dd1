// Device allreduce through the host: the buffer is copied to pinned memory, the
// core's stream (only) is synchronised, the host allreduce (MPI or the ring) runs
// and the result is copied back. Used with GPU_OPERATIONS=mpi and for reductions
// NCCL cannot do (int16); always enabled, so it ends the list.
#pragma once

#include <functional>

#include "cuda/buffers.h"
#include "cuda/device_allreduce.h"
#include "cuda/device_ops.h"

namespace horovodlite {
namespace cuda {

class HostStagedAllreduce : public DeviceAllreduce {
 public:
  explicit HostStagedAllreduce(HostAllreduceFn host) : host_(std::move(host)) {}
  const char* name() const override { return "HOST_STAGED_ALLREDUCE"; }
  bool enabled(const DeviceContext&, DataType, ReduceOp, int64_t) const override { return true; }
  Status run(DeviceContext& ctx, void* buffer, int64_t count, DataType dtype, ReduceOp op) override;

 private:
  HostAllreduceFn host_;
  PinnedBuffer stage_;
};

}  // namespace cuda
}  // namespace horovodlite
