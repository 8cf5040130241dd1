// Allreduce of device tensors: the base of every device allreduce algorithm
// (flat NCCL, hierarchical NCCL + MPI, host-staged). enqueue() is shared: a single
// tensor is reduced in its output; fused tensors are packed into the device
// fusion buffer with batched scaling (or fp16/bf16-casting) kernels, reduced and
// unpacked. An algorithm implements only the buffer-level reduce().
#pragma once

#include <cstdint>

#include "cuda/device_context.h"

namespace horovodlite {
namespace cuda {

class DeviceAllreduce : public DeviceAlgorithm {
 public:
  using DeviceAlgorithm::DeviceAlgorithm;

  // Asks accepts() with the dtype and bytes that travel (fp16 or bf16 with compression).
  bool enabled(const Response& response) const final;

  // ---- what an algorithm implements ----
  virtual bool accepts(DataType dtype, ReduceOp op, int64_t bytes) const = 0;
  // reduce() needs `count` to be a multiple of this (the fusion buffer is padded).
  virtual int64_t granularity() const { return 1; }
  // Enqueues the in-place allreduce of `count` elements at `buffer` (device
  // memory) on ctx().stream(). Average arrives as Sum (the caller scales).
  virtual Status reduce(void* buffer, int64_t count, DataType dtype, ReduceOp op) = 0;
  // Out of place: `recv` = the allreduce of `send` (distinct device buffers of
  // `count` elements). The default copies and reduces in place; an algorithm that
  // reads one buffer and writes another (ncclAllReduce) overrides it to save the copy.
  virtual Status reduce_into(const void* send, void* recv, int64_t count, DataType dtype, ReduceOp op);

 protected:
  Status enqueue(const OpArgs& args, OpOutputs* outputs) final;
};

}  // namespace cuda
}  // namespace horovodlite
