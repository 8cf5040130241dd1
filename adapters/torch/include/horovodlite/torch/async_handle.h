// The result of an asynchronous collective on at::Tensors. It keeps the tensors
// the core reads and writes alive until the op completes (even if the handle is
// dropped), and on synchronize() finishes the op on the caller's thread: copies
// results back into non-contiguous in-place targets and returns the output.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "horovodlite/handle.h"

namespace horovodlite {
namespace torch {

class AsyncHandle {
 public:
  // Runs once, on the first successful synchronize(); returns the op's output.
  using Finisher = std::function<at::Tensor()>;

  AsyncHandle() = default;
  AsyncHandle(HandlePtr handle, Finisher finish);

  bool valid() const { return state_ != nullptr; }
  const std::string& name() const;

  // True once the op has completed (successfully or not). Never blocks.
  bool poll() const;
  // Blocks until completion; throws HorovodError if the op failed. Returns the
  // output tensor (the input tensor itself for in-place ops). May be called
  // again; later calls return the same tensor.
  at::Tensor synchronize() const;
  // Waits at most `timeout`; false if still running. Does not throw on failure.
  bool wait_for(std::chrono::milliseconds timeout) const;

  // Valid after a successful synchronize(): alltoall's rows received from each
  // rank; join's last rank to join.
  std::vector<int64_t> received_splits() const;
  int last_joined_rank() const;

  const HandlePtr& core_handle() const;

 private:
  struct State {
    HandlePtr handle;
    Finisher finish;
    std::mutex mu;
    bool finished = false;
    at::Tensor result;
  };
  const State& state() const;
  std::shared_ptr<State> state_;
};

bool poll(const AsyncHandle& handle);
at::Tensor synchronize(const AsyncHandle& handle);

}  // namespace torch
}  // namespace horovodlite
