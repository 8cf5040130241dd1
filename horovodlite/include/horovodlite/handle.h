// The asynchronous result of an enqueued collective (c10d's Work, not an integer
// in a global map): poll it, wait on it with an optional timeout, read its status.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "horovodlite/common.h"
#include "horovodlite/tensor.h"

namespace horovodlite {

class Handle {
 public:
  explicit Handle(std::string name) : name_(std::move(name)) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  const std::string& name() const { return name_; }

  // True once the op has completed, successfully or not. Never blocks.
  bool poll() const;
  // Blocks until completion and returns the op's status.
  Status wait() const;
  // Blocks at most `timeout`; returns Status::Timeout if the op is still running.
  Status wait(std::chrono::milliseconds timeout) const;
  // The final status, or kInProgress while running.
  Status status() const;

  // Results beyond the output tensor. Valid after successful completion.
  // join: the last rank to join. alltoall: the splits received from each rank.
  int last_joined_rank() const { return last_joined_rank_; }
  const std::vector<int64_t>& received_splits() const { return received_splits_; }
  // The output tensor the op produced (allgather/alltoall/reducescatter: the one
  // returned by the OutputAllocator; otherwise the output view passed in).
  const TensorView& output() const { return output_; }

  // Device ops (tensors on a GPU): an event recorded on the core's stream after
  // the op's last device work, set before the handle completes; nullptr for host
  // ops. The handle completes on the host only once this event has completed, so
  // waiting on the handle is enough; a framework may also make its stream wait on
  // the event (cudaStreamWaitEvent) for ordering without a host round trip.
  const ReadyEventPtr& completion_event() const { return completion_event_; }

  // Registers a function run (on the background thread, or at once if already
  // complete) when the handle completes. Must be quick and must not enqueue-and-wait.
  void on_complete(std::function<void(const Status&)> fn);

  // --- used by the runtime ---
  void complete(Status status);
  // complete() in two halves, for completing many handles at once: mark them
  // all complete (running their callbacks), then wake their waiters, so that a
  // waiter woken by the first finds the others complete too instead of waiting
  // (and switching threads) once per handle.
  void complete_without_waking(Status status);
  void wake() const { cv_.notify_all(); }
  void set_output(const TensorView& out) { output_ = out; }
  void set_last_joined_rank(int r) { last_joined_rank_ = r; }
  void set_received_splits(std::vector<int64_t> s) { received_splits_ = std::move(s); }
  void set_completion_event(ReadyEventPtr event) { completion_event_ = std::move(event); }

 private:
  std::string name_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  Status status_ = Status::InProgress();
  std::vector<std::function<void(const Status&)>> callbacks_;
  int last_joined_rank_ = -1;
  std::vector<int64_t> received_splits_;
  TensorView output_;
  ReadyEventPtr completion_event_;
};

using HandlePtr = std::shared_ptr<Handle>;

}  // namespace horovodlite
