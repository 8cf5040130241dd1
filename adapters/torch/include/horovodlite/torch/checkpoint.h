// Activation checkpointing for LibTorch C++ programs (PyTorch has it only in
// Python, as torch.utils.checkpoint).
//
// checkpoint(fn, inputs...) runs fn without keeping its intermediate
// activations for backward; backward runs fn again on the saved inputs (with the
// RNG state of the first run, so dropout masks match) and backpropagates through
// the recomputed graph.
//
// How it differs from PyTorch's reentrant CheckpointFunction: the first run
// records which tensors that require grad fn reads besides its inputs (the
// parameters of the modules it calls, and tensors computed outside fn that it
// captured), and the checkpoint's node in the autograd graph gets an edge to each.
// The recomputation computes their gradients without accumulating them and hands
// them on through those edges, so:
//   * every parameter's grad accumulator runs exactly once per backward, even when
//     two checkpoints or a checkpoint and plain code share it (tied weights), so
//     the hooks of a DistributedOptimizer fire once per backward;
//   * parameters get gradients even when no input requires grad (the first block
//     of a network that reads data), where PyTorch's reentrant variant gives none;
//   * torch::autograd::grad() works through a checkpoint, not only backward().
// The first run keeps fn's graph alive until fn returns (that is how the tensors
// are found); the graph is dropped before checkpoint() returns, so the peak memory
// of a checkpointed segment is the same in forward as in its recomputation.
//
// fn is kept until the backward and called again there: capture by value (module
// holders, tensors) whatever does not outlive the backward.
//
// Not supported: higher-order gradients through a checkpoint (backward with
// create_graph=true throws); modifying an input in place, inside fn or before the
// backward (the backward throws); fn that builds its graph on other threads
// (torch::nn::parallel::data_parallel inside fn): the parameters used there are
// not found and get no gradient from the checkpoint. Modules with running statistics
// (BatchNorm) update them in both runs, as in PyTorch.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace horovodlite {
namespace torch {

struct CheckpointOptions {
  // Save the CPU generator (and the CUDA generators of the inputs' devices) before
  // the first run and restore it for the recomputation, so random ops (dropout)
  // draw the same numbers; the RNG stream seen after the backward is undisturbed.
  bool preserve_rng_state = true;
  // Keep the saved inputs in CPU memory between forward and backward and move them
  // back to their device for the recomputation. A no-op for CPU tensors.
  bool offload_to_cpu = false;
};

// The function checkpoint() recomputes: tensors in, tensors out.
using CheckpointFunction = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// The core entry point. Returns fn(inputs); the outputs that require grad are
// connected to the inputs and to every tensor requiring grad that fn read. Under
// no-grad or inference mode it simply returns fn(inputs). Inputs may be undefined
// tensors, may or may not require grad; outputs may be undefined or not
// differentiable (integer tensors, tensors that do not require grad).
std::vector<at::Tensor> checkpoint(const CheckpointFunction& fn, std::vector<at::Tensor> inputs,
                                   const CheckpointOptions& options = {});

namespace detail {

template <typename T>
struct IsTensor : std::is_same<std::decay_t<T>, at::Tensor> {};

template <typename... Ts>
struct AllTensors : std::conjunction<IsTensor<Ts>...> {};

// What fn may return, and how it goes to and from a vector of tensors.
template <typename R>
struct CheckpointResult;  // undefined: fn must return one of the types below

template <>
struct CheckpointResult<at::Tensor> {
  static std::vector<at::Tensor> to_vector(at::Tensor r) { return {std::move(r)}; }
  static at::Tensor from_vector(std::vector<at::Tensor> v) { return std::move(v.at(0)); }
};

template <>
struct CheckpointResult<std::vector<at::Tensor>> {
  static std::vector<at::Tensor> to_vector(std::vector<at::Tensor> r) { return r; }
  static std::vector<at::Tensor> from_vector(std::vector<at::Tensor> v) { return v; }
};

template <typename... Ts>
struct CheckpointResult<std::tuple<Ts...>> {
  static_assert(AllTensors<Ts...>::value, "checkpoint: a tuple result must hold only at::Tensor");
  static std::vector<at::Tensor> to_vector(std::tuple<Ts...> r) {
    return std::apply([](auto&&... t) { return std::vector<at::Tensor>{std::move(t)...}; }, std::move(r));
  }
  static std::tuple<Ts...> from_vector(std::vector<at::Tensor> v) {
    return from_vector(std::move(v), std::index_sequence_for<Ts...>{});
  }
  template <std::size_t... I>
  static std::tuple<Ts...> from_vector(std::vector<at::Tensor> v, std::index_sequence<I...>) {
    return std::tuple<Ts...>{std::move(v.at(I))...};
  }
};

template <typename Fn, std::size_t... I>
auto call_with_vector(Fn& fn, const std::vector<at::Tensor>& v, std::index_sequence<I...>) {
  return fn(v[I]...);
}

template <typename Fn, typename... Ts>
using VariadicResult = std::enable_if_t<AllTensors<Ts...>::value && sizeof...(Ts) >= 1,
                                        std::decay_t<std::invoke_result_t<Fn&, const std::decay_t<Ts>&...>>>;

}  // namespace detail

// checkpoint(options, fn, x, y, ...): fn takes the tensors as separate arguments and
// returns an at::Tensor, a std::vector<at::Tensor> or a std::tuple of at::Tensor;
// checkpoint returns the same type.
//   auto y = checkpoint([&](const at::Tensor& x) { return block->forward(x); }, x);
//   auto [a, b] = checkpoint([&](const at::Tensor& x, const at::Tensor& m) {
//     return std::make_tuple(f(x, m), g(x)); }, x, mask);
template <typename Fn, typename... Ts>
detail::VariadicResult<Fn, Ts...> checkpoint(const CheckpointOptions& options, Fn fn, Ts&&... inputs) {
  using R = detail::VariadicResult<Fn, Ts...>;
  CheckpointFunction wrapped = [fn = std::move(fn)](const std::vector<at::Tensor>& v) mutable {
    return detail::CheckpointResult<R>::to_vector(detail::call_with_vector(fn, v, std::index_sequence_for<Ts...>{}));
  };
  return detail::CheckpointResult<R>::from_vector(
      checkpoint(wrapped, std::vector<at::Tensor>{std::forward<Ts>(inputs)...}, options));
}

template <typename Fn, typename... Ts>
detail::VariadicResult<Fn, Ts...> checkpoint(Fn fn, Ts&&... inputs) {
  return checkpoint(CheckpointOptions{}, std::move(fn), std::forward<Ts>(inputs)...);
}

// Like torch.utils.checkpoint.checkpoint_sequential: splits the modules into
// `segments` runs of size() / segments modules (the last one takes the rest),
// checkpoints each run but the last and runs the last one normally.
// Throws std::invalid_argument unless 1 <= segments <= sequential->size().
at::Tensor checkpoint_sequential(::torch::nn::Sequential sequential, int segments, at::Tensor input,
                                 bool preserve_rng_state = true);

// A module that runs the module it wraps under checkpoint() in training mode with
// grad enabled, and plainly otherwise (eval mode, no-grad, inference). The wrapped
// module is registered as the submodule "module", so it is part of parameters(),
// train()/eval() and to(). It must have forward(at::Tensor) -> at::Tensor.
class CheckpointWrapperImpl : public ::torch::nn::Module {
 public:
  explicit CheckpointWrapperImpl(::torch::nn::AnyModule module, CheckpointOptions options = {});

  at::Tensor forward(const at::Tensor& input);

  ::torch::nn::AnyModule& wrapped() { return module_; }
  const CheckpointOptions& options() const { return options_; }

  void pretty_print(std::ostream& stream) const override;

 private:
  ::torch::nn::AnyModule module_;
  CheckpointOptions options_;
};

// The holder TORCH_MODULE(CheckpointWrapper) would declare, spelled out because
// the macro names `torch::nn`, which inside horovodlite::torch means the wrong one.
class CheckpointWrapper : public ::torch::nn::ModuleHolder<CheckpointWrapperImpl> {
 public:
  using ::torch::nn::ModuleHolder<CheckpointWrapperImpl>::ModuleHolder;
  using Impl = CheckpointWrapperImpl;
};

// checkpoint_wrapper(torch::nn::Linear(4, 4)), checkpoint_wrapper(my_block, {true, true}):
// any module holder, std::shared_ptr to a module, or AnyModule.
template <typename M>
CheckpointWrapper checkpoint_wrapper(M&& module, CheckpointOptions options = {}) {
  return CheckpointWrapper(::torch::nn::AnyModule(std::forward<M>(module)), options);
}

}  // namespace torch
}  // namespace horovodlite
