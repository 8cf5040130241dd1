// Runs one (possibly fused) response on this rank: the same list of responses is
// executed in the same order on every rank.
#pragma once

#include <memory>
#include <vector>

#include "entry.h"
#include "execution_observer.h"
#include "fusion_buffer.h"
#include "horovodlite/config.h"
#include "message.h"
#include "mpi_context.h"
#include "cuda/device_ops.h"
#include "ops/host_allreduce.h"

namespace horovodlite {

class Executor {
 public:
  Executor(MpiContext& mpi, const Config& config);

  // entries[i] belongs to response.names[i]; nullptr where this rank has none
  // (it has joined). Returns the status every entry completes with.
  // Responses on device tensors go to the device path (builds with CUDA); their
  // handles then complete later, see defer_completion().
  Status execute(const Response& response, const std::vector<TensorEntry*>& entries);
  // After execute(): takes the entries if the response left device work in
  // flight (their handles complete once the device is done); false otherwise,
  // and the caller completes them.
  bool defer_completion(std::vector<std::unique_ptr<TensorEntry>>* done, const Status& status);
  // Waits until every deferred handle has completed (shutdown).
  void drain();

  // The name of the collective the last allreduce used (for the timeline).
  const char* last_algorithm() const { return last_algorithm_; }
  // Receives the phases of each execution (the timeline's fusion-buffer copies
  // and collective); nullptr for none.
  void set_observer(ExecutionObserver* observer) { observer_ = observer; }

 private:
  Status execute_host(const Response& r, const std::vector<TensorEntry*>& entries);
  Status allreduce(const Response& r, const std::vector<TensorEntry*>& entries);
  Status allreduce_fp16(const Response& r, const std::vector<TensorEntry*>& entries);
  Status allgather(const Response& r, TensorEntry& e);
  Status broadcast(const Response& r, TensorEntry& e);
  Status alltoall(const Response& r, TensorEntry& e);
  Status reducescatter(const Response& r, TensorEntry& e);
  HostAllreduce& choose(DataType dtype, ReduceOp op, int64_t bytes);
  // Agrees on whether every rank is ready for a collective whose preparation can
  // fail on some ranks only (output allocation, size limits): returns `local` if
  // it failed here, an error if it failed elsewhere, OK if it succeeded everywhere.
  Status agree(const Status& local, const std::string& name);

  MpiContext& mpi_;
  const Config& config_;
  std::vector<std::unique_ptr<HostAllreduce>> host_allreduce_;
  FusionBuffer fusion_;
  const char* last_algorithm_ = "";
  ExecutionObserver* observer_ = nullptr;
  std::unique_ptr<DeviceOps> device_;  // nullptr without CUDA
  bool last_on_device_ = false;
};

}  // namespace horovodlite
