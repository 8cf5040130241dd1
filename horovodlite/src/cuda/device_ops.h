// The executor's interface to collectives on device (CUDA) tensors. This header
// needs no CUDA: builds without CUDA compile it and get no implementation
// (make_device_ops returns nullptr; ops/registry.cc is the one place that knows).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "entry.h"
#include "horovodlite/config.h"
#include "message.h"

namespace horovodlite {

class MpiContext;

// Runs a response on host tensors (the executor's CPU path): the device path's
// fallback for host-staged collectives.
using HostExecuteFn = std::function<Status(const Response&, const std::vector<TensorEntry*>&)>;
// In-place allreduce of a host buffer with the host algorithm chosen for the message.
using HostAllreduceFn = std::function<Status(void* buffer, int64_t count, DataType dtype, ReduceOp op)>;

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  // Enqueues a data response (allreduce, allgather, broadcast, alltoall,
  // reducescatter) whose tensors are on a device: waits for the inputs' ready
  // events on the core's stream, enqueues the work and records a completion
  // event. Does not wait for the device (host-staged paths synchronise the core's
  // stream, never the whole device). Called on the background thread only.
  virtual Status execute(const Response& response, const std::vector<TensorEntry*>& entries) = 0;
  // The collective the last execute() used, for the timeline.
  virtual const char* last_algorithm() const = 0;
  // Takes the entries of the response just executed if it left device work in
  // flight: their handles then complete (with `status`) from the completion
  // thread once the device has finished. False (entries untouched) otherwise.
  virtual bool defer_completion(std::vector<std::unique_ptr<TensorEntry>>* done, const Status& status) = 0;
  // Blocks until every deferred handle has completed (shutdown).
  virtual void drain() = 0;
};

// nullptr in builds without CUDA. Collective over mpi.comm() only in what it
// creates lazily (NCCL communicators, at the first device response).
std::unique_ptr<DeviceOps> make_device_ops(MpiContext& mpi, const Config& config, HostExecuteFn host_execute,
                                           HostAllreduceFn host_allreduce);

// OK when `device` names a CUDA device this build and process can use; an error
// naming the tensor otherwise (Unimplemented in builds without CUDA).
Status check_device(const std::string& name, int device);

// Build facts for the public API.
bool device_backend_built();
int device_nccl_version();
int device_count();

}  // namespace horovodlite
