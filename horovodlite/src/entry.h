// One enqueued operation as the runtime holds it until completion.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "horovodlite/handle.h"
#include "horovodlite/tensor.h"
#include "message.h"

namespace horovodlite {

struct TensorEntry {
  Request request;
  TensorView input;
  TensorView output;            // allreduce/broadcast: where the result goes
  OutputAllocator allocate;     // allgather/alltoall/reducescatter
  std::vector<int64_t> splits;  // alltoall: rows sent to each rank
  std::shared_ptr<ReadyEvent> ready;
  HandlePtr handle;
  std::chrono::steady_clock::time_point enqueued;
  // A barrier of the global set that adds or removes a process set: run on the
  // background thread, on every rank at the same point, instead of the barrier.
  std::function<Status()> action;
};

}  // namespace horovodlite
