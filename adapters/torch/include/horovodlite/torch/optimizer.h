// DistributedOptimizer: wraps any torch::optim::Optimizer so that gradients are
// averaged (or summed) across ranks before each step, Horovod-style: a hook on
// each parameter's gradient accumulator starts that gradient's allreduce while
// backward is still running, and step() waits for them and then steps.
#pragma once

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "horovodlite/common.h"
#include "horovodlite/process_set.h"
#include "horovodlite/torch/async_handle.h"
#include "horovodlite/torch/compat.h"

namespace torch {
namespace autograd {
struct Node;
}  // namespace autograd
}  // namespace torch

namespace horovodlite {
namespace torch {

// The core's enum (horovodlite/common.h): kFp16 (kBf16) makes float32/float64
// gradients travel as float16 (bfloat16); they are restored to their dtype.
using Compression = ::horovodlite::Compression;

struct DistributedOptimizerOptions {
  // kAverage or kSum: gradients are reduced before the step. kAdasum (Horovod's
  // Adasum optimizer): the wrapped optimizer steps locally, the updates (new
  // parameters less the old) are combined with the Adasum allreduce and applied
  // to the parameters from before the local step; no learning-rate scaling by
  // the number of ranks is implied (Horovod's Adasum guide). Global process set
  // only, no gradient_predivide_factor; synchronize() does nothing.
  ReduceOp op = ReduceOp::kAverage;
  Compression compression = Compression::kNone;
  // Allreduce once every N backward passes (gradients accumulate locally in between).
  int backward_passes_per_step = 1;
  // Average only: gradients are scaled by 1/f before the sum and by f/size after.
  double gradient_predivide_factor = 1.0;
  // The ranks that average their gradients (Average divides by the set's size);
  // the other ranks must not step this optimizer.
  ProcessSet process_set;
};

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

class DistributedOptimizer {
 public:
  // `named_parameters` names every parameter of `optimizer` the same way on every
  // rank (module->named_parameters()); allreduces are named "allreduce.<name>".
  // Empty: parameters are named by position ("allreduce.noname.<group>.<index>").
  DistributedOptimizer(std::shared_ptr<::torch::optim::Optimizer> optimizer, const NamedTensors& named_parameters,
                       const DistributedOptimizerOptions& options = {});
  DistributedOptimizer(std::shared_ptr<::torch::optim::Optimizer> optimizer,
                       const ::torch::OrderedDict<std::string, at::Tensor>& named_parameters,
                       const DistributedOptimizerOptions& options = {});
  ~DistributedOptimizer();

  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // Synchronizes the gradients (unless synchronize() was already called since
  // the last step) and steps the wrapped optimizer.
  at::Tensor step(::torch::optim::Optimizer::LossClosure closure = nullptr);
  // Waits for every gradient allreduce, starting those whose hooks did not fire
  // (unused parameters get zero gradients, as in Horovod), so that every rank
  // issues the same names. Call it before step() to look at or clip gradients.
  void synchronize();
  // Throws if gradient allreduces are pending (call step() or synchronize() first).
  void zero_grad();

  ::torch::optim::Optimizer& optimizer() { return *optimizer_; }
  const std::shared_ptr<::torch::optim::Optimizer>& optimizer_ptr() const { return optimizer_; }
  const DistributedOptimizerOptions& options() const { return options_; }
  // The allreduce names, in the optimizer's parameter order.
  std::vector<std::string> allreduce_names() const;

 private:
  class GradHook;
  struct Param {
    std::string name;
    at::Tensor tensor;
    compat::NodeHandle grad_accumulator;  // keeps the hook alive
    uintptr_t hook_key = 0;
    int delay = 0;  // backward passes left before the allreduce starts
    AsyncHandle handle;
  };

  void register_hooks(const NamedTensors& named_parameters);
  void on_gradient_ready(size_t index);
  void start_allreduce(Param& param);
  void finish_allreduce(Param& param);
  at::Tensor adasum_step(::torch::optim::Optimizer::LossClosure closure);

  std::shared_ptr<::torch::optim::Optimizer> optimizer_;
  DistributedOptimizerOptions options_;
  std::vector<Param> params_;
  std::mutex mu_;
  bool synchronized_ = false;
};

}  // namespace torch
}  // namespace horovodlite
