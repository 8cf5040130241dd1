// The device resources of one process, shared by every device algorithm: the GPU
// it uses for collectives, the core's stream (created once, non-blocking), the
// NCCL communicator over all ranks (GPU_OPERATIONS=nccl), the device fusion
// buffer, pinned staging buffers and the completion thread. The GPU, stream and
// communicator are set up at the first device response (collectively: every rank
// executes the same responses in the same order).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "cuda/buffers.h"
#include "cuda/completion_queue.h"
#include "cuda/nccl_context.h"
#include "horovodlite/config.h"
#include "mpi/mpi_world.h"
#include "ops/algorithm.h"
#include "world.h"

namespace horovodlite {
namespace cuda {

class DeviceContext : public SharedResource {
 public:
  DeviceContext(const World& world, const Config& config) : world_(world), config_(config) {}
  ~DeviceContext() override;
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  // Before a device response: selects the GPU of the entries (a joined rank's:
  // the one used before, or its local one) and sets everything up at the first
  // response. A failed set-up is returned for every later response (not
  // retried), with *repeated set.
  Status begin(const std::vector<TensorEntry*>& entries, bool* repeated);
  // Makes the stream wait for the entries' ready events.
  Status wait_ready(const std::vector<TensorEntry*>& entries);
  // After a device response: records its completion event after whatever was
  // enqueued, even on failure (the entries, and the buffers they keep alive,
  // are released only once the device is done with them). The handles then
  // complete from the completion thread. A failure to record goes into *status.
  std::shared_ptr<DeferredCompletion> finish(Status* status);
  void drain() override { completions_.drain(); }

  // The device fusion buffer (at least `bytes`), or nullptr with *s set.
  void* fusion(size_t bytes, Status* s);
  PinnedBuffer& stage_in() { return stage_in_; }
  PinnedBuffer& stage_out() { return stage_out_; }

  const World& world() const { return world_; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  // nullptr when device collectives go through the host (GPU_OPERATIONS=mpi).
  NcclComm* comm() const { return comm_.get(); }

 private:
  Status ensure(int device, bool* repeated);

  const World& world_;
  const Config& config_;
  int device_ = -1;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<NcclComm> comm_;
  Status setup_error_;  // a failed set-up, returned for every later response
  DeviceBuffer fusion_;
  PinnedBuffer stage_in_, stage_out_;
  CompletionQueue completions_;  // last: its thread stops first
};

// The base of every device algorithm: run() sets the device up, makes the stream
// wait for the inputs, enqueues the algorithm's work and returns the completion
// to defer; an algorithm implements enqueue().
class DeviceAlgorithm : public Algorithm {
 public:
  explicit DeviceAlgorithm(std::shared_ptr<DeviceContext> ctx) : ctx_(std::move(ctx)) {}
  OpResult run(const OpArgs& args) final;

 protected:
  // Enqueues the work on ctx().stream(), after the inputs' ready events. Does
  // not wait for the device (host-staged work synchronises the stream only).
  // Fills `outputs` (OpResult::outputs: one per entry) with what the op produces.
  virtual Status enqueue(const OpArgs& args, OpOutputs* outputs) = 0;
  DeviceContext& ctx() const { return *ctx_; }

 private:
  std::shared_ptr<DeviceContext> ctx_;
};

}  // namespace cuda
}  // namespace horovodlite
