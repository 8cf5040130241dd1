// Collectives on device tensors: NCCL where it can, the host path (pinned
// staging + MPI) otherwise. Everything is enqueued on the core's own stream:
// it first waits for the inputs' ready events (cudaStreamWaitEvent), then packs
// into the persistent device fusion buffer with batched (scaling / fp16-casting)
// kernels, runs the collective, unpacks, and records a completion event that the
// handles expose. The background thread does not wait for the device: the
// completion queue completes the handles once the event has fired.
#pragma once

#include <memory>
#include <vector>

#include "cuda/buffers.h"
#include "cuda/completion_queue.h"
#include "cuda/device_allreduce.h"
#include "cuda/device_context.h"
#include "cuda/device_ops.h"
#include "mpi_context.h"

namespace horovodlite {
namespace cuda {

class DeviceExecutor : public DeviceOps {
 public:
  // `allreduce`: the device allreduce algorithms, most preferred first; the last
  // must always be enabled (host-staged).
  DeviceExecutor(MpiContext& mpi, const Config& config, HostExecuteFn host,
                 std::vector<std::unique_ptr<DeviceAllreduce>> allreduce);
  ~DeviceExecutor() override;

  Status execute(const Response& response, const std::vector<TensorEntry*>& entries) override;
  const char* last_algorithm() const override { return last_algorithm_; }
  bool defer_completion(std::vector<std::unique_ptr<TensorEntry>>* done, const Status& status) override;
  void drain() override { completions_.drain(); }

 private:
  Status ensure_context(int device);
  Status wait_ready(const std::vector<TensorEntry*>& entries);
  Status run(const Response& r, const std::vector<TensorEntry*>& entries);
  Status allreduce(const Response& r, const std::vector<TensorEntry*>& entries);
  Status allgather(const Response& r, TensorEntry& e);
  Status broadcast(const Response& r, TensorEntry& e);
  Status alltoall(const Response& r, TensorEntry& e);
  Status reducescatter(const Response& r, TensorEntry& e);
  // Any op through the host path: inputs staged to pinned memory, outputs back.
  Status host_staged(const Response& r, const std::vector<TensorEntry*>& entries);
  Status agree(const Status& local, const std::string& name);
  void* fusion(size_t bytes, Status* s);

  MpiContext& mpi_;
  const Config& config_;
  HostExecuteFn host_;
  std::vector<std::unique_ptr<DeviceAllreduce>> allreduce_;
  DeviceContext ctx_;
  Status context_error_;  // a failed lazy initialisation, returned for every later op
  DeviceBuffer fusion_;
  PinnedBuffer stage_in_, stage_out_;
  std::shared_ptr<CudaEvent> pending_;  // the completion event of the last execute()
  const char* last_algorithm_ = "";
  CompletionQueue completions_;  // last: its thread stops first
};

}  // namespace cuda
}  // namespace horovodlite
