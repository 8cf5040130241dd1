// The interface of every collective algorithm, for every op and placement (host
// or device): MPI, our ring, NCCL, host-staged, hierarchical. The registry keeps
// one ordered list per (op, placement); the executor runs the first algorithm
// whose enabled() says yes (as Horovod's OperationManager). An algorithm is a
// class: set-up in its constructor (communicators, buffers), the work in run().
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "entry.h"
#include "execution_observer.h"
#include "message.h"

namespace horovodlite {

enum class Placement : uint8_t { kHost = 0, kDevice = 1 };
inline Placement placement_of(const Response& r) {
  return r.device == kCpuDevice ? Placement::kHost : Placement::kDevice;
}

// Work a collective left in flight (device work enqueued on a stream): the
// entries' handles complete with `status` once it has finished, on another
// thread. The entries (and so the framework's tensors) live until then.
class DeferredCompletion {
 public:
  virtual ~DeferredCompletion() = default;
  virtual void complete(std::vector<std::unique_ptr<TensorEntry>> entries, const Status& status) = 0;
};

// What an op produced for one entry; the runtime hands it to the entry's handle
// when the op succeeds (algorithms never touch handles).
struct OpOutput {
  // The output tensor: the view the entry was enqueued with (allreduce,
  // broadcast) or the one its allocator returned (allgather, alltoall, reducescatter).
  TensorView tensor;
  std::vector<int64_t> received_splits;  // alltoall: the rows each rank sent this one
};
using OpOutputs = std::vector<OpOutput>;

// What running a response returns.
struct OpResult {
  OpResult() = default;
  explicit OpResult(Status s, const char* algorithm_name = "") : status(std::move(s)), algorithm(algorithm_name) {}
  OpResult(Status s, const char* algorithm_name, OpOutputs op_outputs)
      : status(std::move(s)), algorithm(algorithm_name), outputs(std::move(op_outputs)) {}

  Status status;
  // The timeline's name for the collective that ran (e.g. "RING_ALLREDUCE"); "" for none.
  const char* algorithm = "";
  // outputs[i] belongs to entries[i] (response.names[i]); an entry this rank does
  // not have (it joined) gets an empty one. Empty for ops without outputs
  // (barrier, join, errors). Valid when `status` is OK (for a deferred op: once
  // the device work it enqueued has finished).
  OpOutputs outputs;
  // null: the caller completes the entries with `status` now.
  std::shared_ptr<DeferredCompletion> deferred;
  // The failure repeats one already logged (e.g. a failed device set-up, given to
  // every later device op): the caller need not log it again.
  bool reported = false;
};

// One execution: a (possibly fused) response and this rank's entries for it.
struct OpArgs {
  const Response& response;
  // entries[i] belongs to response.names[i]; nullptr where this rank has none (it joined).
  const std::vector<TensorEntry*>& entries;
  // Receives the phases (fusion-buffer copies, the collective); may be null.
  ExecutionObserver* observer = nullptr;
};

class Algorithm {
 public:
  virtual ~Algorithm() = default;
  // The timeline's name for it ("MPI_ALLREDUCE", "NCCL_ALLGATHER", ...).
  virtual const char* name() const = 0;
  // Whether it runs this response. Every rank must answer alike for the same
  // response (they all run the same algorithm), so this depends only on the
  // response and on what every rank set up alike.
  virtual bool enabled(const Response& response) const = 0;
  // Runs the response (called on the background thread, in the same order on every rank).
  virtual OpResult run(const OpArgs& args) = 0;
};

// State several algorithms share (the device context: GPU, stream, NCCL
// communicator, completion thread); the registry keeps it to drain it at shutdown.
class SharedResource {
 public:
  virtual ~SharedResource() = default;
  // Waits until every deferred completion has been delivered.
  virtual void drain() {}
};

}  // namespace horovodlite
