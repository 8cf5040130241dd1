#include "horovodlite/torch/optimizer.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <set>
#include <sstream>
#include <unordered_map>

#include "horovodlite/horovodlite.h"
#include "horovodlite/torch/collectives.h"
#include "horovodlite/torch/error.h"

namespace horovodlite {
namespace torch {

constexpr char kTooManyPasses[] =
    "Gradients were computed more than backward_passes_per_step times before call to step(). "
    "Increase backward_passes_per_step to accumulate gradients locally.";

// Runs after a parameter's AccumulateGrad node has accumulated into .grad.
class DistributedOptimizer::GradHook : public ::torch::autograd::FunctionPostHook {
 public:
  GradHook(DistributedOptimizer* owner, size_t index) : owner_(owner), index_(index) {}
  ::torch::autograd::variable_list operator()(const ::torch::autograd::variable_list& outputs,
                                              const ::torch::autograd::variable_list& /*inputs*/) override {
    owner_->on_gradient_ready(index_);
    return outputs;
  }

 private:
  DistributedOptimizer* owner_;
  size_t index_;
};

DistributedOptimizer::DistributedOptimizer(std::shared_ptr<::torch::optim::Optimizer> optimizer,
                                           const ::torch::OrderedDict<std::string, at::Tensor>& named_parameters,
                                           const DistributedOptimizerOptions& options)
    : DistributedOptimizer(std::move(optimizer), named_parameters.pairs(), options) {}

DistributedOptimizer::DistributedOptimizer(std::shared_ptr<::torch::optim::Optimizer> optimizer,
                                           const NamedTensors& named_parameters,
                                           const DistributedOptimizerOptions& options)
    : optimizer_(std::move(optimizer)), options_(options) {
  check_argument(optimizer_ != nullptr, "DistributedOptimizer: the optimizer is null");
  check_argument(
      options_.op == ReduceOp::kAverage || options_.op == ReduceOp::kSum || options_.op == ReduceOp::kAdasum,
      std::string("DistributedOptimizer: op must be Average, Sum or Adasum, got ") + reduce_op_name(options_.op));
  check_argument(options_.op != ReduceOp::kAdasum || options_.process_set.id() == 0,
                 "DistributedOptimizer: Adasum does not support non-global process sets (as Horovod)");
  check_argument(options_.backward_passes_per_step >= 1,
                 "DistributedOptimizer: backward_passes_per_step must be >= 1, got " +
                     std::to_string(options_.backward_passes_per_step));
  check_argument(options_.gradient_predivide_factor > 0.0,
                 "DistributedOptimizer: gradient_predivide_factor must be positive");
  check_argument(options_.gradient_predivide_factor == 1.0 || options_.op == ReduceOp::kAverage,
                 "DistributedOptimizer: gradient_predivide_factor is only supported with op Average");
  register_hooks(named_parameters);
}

DistributedOptimizer::~DistributedOptimizer() {
  for (Param& p : params_) {
    if (p.grad_accumulator) p.grad_accumulator->del_post_hook(p.hook_key);
    // In-flight allreduces keep their tensors alive on their own; wait so that no
    // gradient is written after the optimizer is gone.
    // Its result was the abandoned step's to report; a destructor has nobody to tell.
    if (p.handle.valid()) static_cast<void>(p.handle.core_handle()->wait());
  }
}

void DistributedOptimizer::register_hooks(const NamedTensors& named_parameters) {
  std::unordered_map<const void*, std::string> names;
  std::set<std::string> seen;
  for (const auto& item : named_parameters) {
    check_argument(seen.insert(item.first).second,
                   "DistributedOptimizer: parameter names must be unique; '" + item.first + "' appears twice");
    if (item.second.defined()) names.emplace(item.second.unsafeGetTensorImpl(), item.first);
  }

  std::set<const void*> added;
  const auto& groups = optimizer_->param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& tensors = groups[g].params();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const at::Tensor& t = tensors[i];
      if (!added.insert(t.unsafeGetTensorImpl()).second) continue;
      Param p;
      if (named_parameters.empty()) {
        p.name = "allreduce.noname." + std::to_string(g) + "." + std::to_string(i);
      } else {
        auto it = names.find(t.unsafeGetTensorImpl());
        check_argument(it != names.end(), "DistributedOptimizer: named_parameters was given, but parameter " +
                                              std::to_string(i) + " of param group " + std::to_string(g) +
                                              " is not in it");
        p.name = "allreduce." + it->second;
      }
      p.tensor = t;
      p.delay = options_.backward_passes_per_step;
      params_.push_back(std::move(p));
    }
  }
  // Only parameters that receive gradients take part (as in Horovod).
  std::vector<Param> kept;
  for (Param& p : params_) {
    if (p.tensor.requires_grad()) kept.push_back(std::move(p));
  }
  params_ = std::move(kept);
  for (size_t i = 0; i < params_.size(); ++i) {
    Param& p = params_[i];
    check_argument(p.tensor.is_leaf(), "DistributedOptimizer: parameter '" + p.name + "' is not a leaf tensor");
    p.grad_accumulator = ::torch::autograd::impl::grad_accumulator(p.tensor);
    p.hook_key = p.grad_accumulator->add_post_hook(std::make_unique<GradHook>(this, i));
  }
}

std::vector<std::string> DistributedOptimizer::allreduce_names() const {
  std::vector<std::string> out;
  for (const Param& p : params_) out.push_back(p.name);
  return out;
}

void DistributedOptimizer::on_gradient_ready(size_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  Param& p = params_[index];
  if (p.delay <= 0) throw HorovodError(StatusCode::kPrecondition, kTooManyPasses);
  --p.delay;
  // Adasum combines updates, not gradients: nothing leaves before step().
  if (p.delay == 0 && options_.op != ReduceOp::kAdasum) start_allreduce(p);
}

void DistributedOptimizer::start_allreduce(Param& p) {
  at::NoGradGuard no_grad;
  at::Tensor& grad = p.tensor.mutable_grad();
  if (!grad.defined()) grad = at::zeros_like(p.tensor, at::MemoryFormat::Contiguous);  // unused parameter

  AllreduceOptions ar;
  ar.op = options_.op;
  if (options_.op == ReduceOp::kAverage) {
    // The core applies the 1/size of Average after postscale.
    ar.prescale_factor = 1.0 / options_.gradient_predivide_factor;
    ar.postscale_factor = options_.gradient_predivide_factor;
  }
  // fp16/bf16 compression happens inside the core: float32/float64 gradients are
  // converted while being packed into the fusion buffer and restored on the way
  // out, with no extra tensor per gradient.
  ar.compression = options_.compression;
  ar.process_set = options_.process_set;
  p.handle = allreduce_async_(grad, p.name, ar);
}

void DistributedOptimizer::finish_allreduce(Param& p) { p.handle.synchronize(); }

void DistributedOptimizer::synchronize() {
  if (options_.op == ReduceOp::kAdasum) return;  // the updates are combined in step()
  std::lock_guard<std::mutex> lock(mu_);
  std::string first_error;
  StatusCode first_code = StatusCode::kOk;
  auto remember = [&](const std::exception& e, StatusCode code) {
    if (first_code == StatusCode::kOk) {
      first_error = e.what();
      first_code = code;
    }
  };
  // Start what the hooks did not (unused parameters, fewer backward passes than
  // backward_passes_per_step), in parameter order.
  for (Param& p : params_) {
    if (p.handle.valid()) continue;
    try {
      start_allreduce(p);
    } catch (const HorovodError& e) {
      remember(e, e.code());
    }
  }
  // Wait for all of them, even after a failure, so that none stays in flight.
  for (Param& p : params_) {
    try {
      if (p.handle.valid()) finish_allreduce(p);
    } catch (const HorovodError& e) {
      remember(e, e.code());
    } catch (const std::exception& e) {
      remember(e, StatusCode::kInternal);
    }
    p.handle = AsyncHandle();
    p.delay = options_.backward_passes_per_step;
  }
  if (first_code != StatusCode::kOk) throw HorovodError(first_code, first_error);
  synchronized_ = true;
}

at::Tensor DistributedOptimizer::step(::torch::optim::Optimizer::LossClosure closure) {
  if (options_.op == ReduceOp::kAdasum) return adasum_step(std::move(closure));
  if (!synchronized_) synchronize();
  synchronized_ = false;
  return optimizer_->step(std::move(closure));
}

// Horovod's Adasum optimizer: the local step first (on the gradients of this
// rank, accumulated over backward_passes_per_step passes), then the update of
// every parameter is combined across ranks with Adasum and added to the
// parameter's value from before the step. (Horovod steps each parameter from
// its gradient hook; stepping them together here gives the same update for the
// element-wise torch::optim optimizers, and every update leaves at once.)
// Adasum's rules (floating point, a power-of-two number of ranks) are the
// core's to check, as each update is enqueued; its error names the tensor and
// the rank. A parameter whose update failed keeps its value from before the
// step (the wrapped optimizer's own state has stepped).
at::Tensor DistributedOptimizer::adasum_step(::torch::optim::Optimizer::LossClosure closure) {
  at::Tensor loss;
  if (closure) {
    at::AutoGradMode grad(true);
    loss = closure();
  }
  std::lock_guard<std::mutex> lock(mu_);
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> start;
  start.reserve(params_.size());
  for (const Param& p : params_) start.push_back(p.tensor.detach().clone());
  optimizer_->step();
  AllreduceOptions ar;
  ar.op = ReduceOp::kAdasum;
  ar.compression = options_.compression;
  std::vector<at::Tensor> deltas;
  for (size_t i = 0; i < params_.size(); ++i) {
    Param& p = params_[i];
    deltas.push_back(p.tensor.detach());
    deltas.back().sub_(start[i]);  // the parameter holds its update until the combined one arrives
    p.handle = allreduce_async_(deltas.back(), p.name, ar);
  }
  std::string first_error;
  StatusCode first_code = StatusCode::kOk;
  for (size_t i = 0; i < params_.size(); ++i) {
    Param& p = params_[i];
    bool combined = true;
    try {
      p.handle.synchronize();
    } catch (const HorovodError& e) {
      combined = false;
      if (first_code == StatusCode::kOk) {
        first_error = e.what();
        first_code = e.code();
      }
    }
    if (combined) {
      deltas[i].add_(start[i]);
    } else {
      deltas[i].copy_(start[i]);
    }
    p.handle = AsyncHandle();
    p.delay = options_.backward_passes_per_step;
  }
  if (first_code != StatusCode::kOk) throw HorovodError(first_code, first_error);
  return loss;
}

void DistributedOptimizer::zero_grad() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Param& p : params_) {
      if (p.handle.valid() || p.delay != options_.backward_passes_per_step) {
        throw HorovodError(StatusCode::kPrecondition,
                           "DistributedOptimizer::zero_grad() was called after backward() but before step() or "
                           "synchronize(); this is prohibited as it races with the gradient allreduces");
      }
    }
  }
  optimizer_->zero_grad();
}

}  // namespace torch
}  // namespace horovodlite
