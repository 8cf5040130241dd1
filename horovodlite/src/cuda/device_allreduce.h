// In-place allreduce of a device buffer: the interface of every device algorithm
// (flat NCCL, hierarchical NCCL + MPI, host-staged MPI), chosen per message from
// an ordered list like HostAllreduce (ops/registry.cc builds the list).
#pragma once

#include <cstdint>

#include "cuda/device_context.h"
#include "horovodlite/common.h"

namespace horovodlite {
namespace cuda {

class DeviceAllreduce {
 public:
  virtual ~DeviceAllreduce() = default;
  // The timeline's name for the collective.
  virtual const char* name() const = 0;
  virtual bool enabled(const DeviceContext& ctx, DataType dtype, ReduceOp op, int64_t bytes) const = 0;
  // run() needs `count` to be a multiple of this (the caller pads the fusion buffer).
  virtual int64_t granularity() const { return 1; }
  // Enqueues the allreduce of `count` elements at `buffer` (device memory) on
  // ctx.stream. Average arrives as Sum (the caller scales).
  virtual Status run(DeviceContext& ctx, void* buffer, int64_t count, DataType dtype, ReduceOp op) = 0;
};

}  // namespace cuda
}  // namespace horovodlite
