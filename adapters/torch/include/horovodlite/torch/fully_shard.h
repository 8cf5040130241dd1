// fully_shard: ZeRO stage 3 for LibTorch modules, the C++ twin of Python's
// hvd.fully_shard (horovodlite/torch/fsdp.py).
//
//   auto fc1 = hvd::fully_shard(net->fc1);          // one unit per call
//   auto fc2 = hvd::fully_shard(net->fc2);
//   torch::optim::Adam opt(concat(fc1->shards(), fc2->shards()), ...);
//   y = fc2->forward(torch::tanh(fc1->forward(x)));  // gathers, then frees
//   loss.backward();                                 // gathers again, reduces
//   fc1->synchronize(); fc2->synchronize();          // or unit->step(opt)
//   opt.step(); opt.zero_grad();
//
// A unit keeps its parameter tensors (LinearImpl::weight stays the same
// object) but swaps their data: at rest each parameter holds an empty tensor,
// and shards()[i] (1-D, requires_grad as the parameter) holds this rank's
// chunk of its flattened values, padded to a multiple of the set's size N, set
// rank r owning the r-th chunk (as ZeroRedundancyOptimizer shards). Give the
// shards to any elementwise torch::optim optimizer.
//
// A step:
//  - forward(...) (the unit's own forward, through an AnyModule) or run(fn)
//    gathers the parameters (allgather) into a buffer per parameter and points
//    the parameters at it, runs, hooks the outputs that require grad, and with
//    reshard_after_forward (default) frees the buffers' storage. unshard() /
//    reshard() do the two halves by hand (e.g. a Sequential, whose templated
//    forward no AnyModule takes; call after_forward(outputs) between them);
//  - the first output gradient (the pre-backward) gathers the parameters again
//    into the same storage, so the views autograd saved in forward see them.
//    Which units' backward runs may differ across ranks (an output unused on
//    some), so the units of a set issue these gathers in one order on every
//    rank, the reverse of the forward's: a unit's pre-backward issues every
//    gather up to its own and waits for its own only; the next forward or
//    synchronize() issues and waits for the rest;
//  - a hook on each parameter's grad accumulator reducescatters its full
//    gradient as soon as autograd has it, drops it and frees the buffer; more
//    than max_inflight_bytes in flight waits for the oldest at most 0.2 s, then
//    goes on (another rank may send in another order);
//  - synchronize() (collective; before the optimizer's step) adds the reduced
//    chunks to the shards' grad (accumulating over backward passes: each pass
//    reduces its own) and sends zeros for the parameters that got fewer
//    gradients here than on another rank, so that every rank sends the same
//    names. LibTorch offers no end-of-backward callback to user code, hence
//    this explicit call.
// Every rank of the set must run the forward and backward of the same units
// (their gathers are collectives). Collectives are named
// "fully_shard.<set>.<k>.<i>..." (k counts the units made on the set, i the
// parameter). Parameters already managed by another unit (a fully sharded
// submodule) and parameters without elements are left alone. Construction is a
// collective: if the parameter layouts differ across the set's ranks every rank
// throws the same HorovodError naming the parameter and the ranks.
//
// Not done (Python does them): prefetching the next unit's gathers (a gather
// waits at once, except those issued ahead for the backward order), a parent
// unit gathering for its children on its own (call each unit's forward),
// activation checkpointing.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "horovodlite/common.h"
#include "horovodlite/process_set.h"
#include "horovodlite/torch/async_handle.h"
#include "horovodlite/torch/compat.h"
#include "horovodlite/torch/optimizer.h"

namespace horovodlite {
namespace torch {

struct FullyShardOptions {
  // The ranks that share the unit; only they make and run it.
  ProcessSet process_set;
  // Free the gathered parameters after forward and gather them again for
  // backward (true), or keep them until backward has their gradients.
  bool reshard_after_forward = true;
  // kFp16 (kBf16): floating gradients are reducescattered as float16 (bfloat16)
  // and cast back.
  Compression compression = Compression::kNone;
  // kAverage or kSum over the set's ranks.
  ReduceOp op = ReduceOp::kAverage;
  // Full-size gradients waiting for their reducescatter, at most (beyond it the
  // hook waits up to 0.2 s for the oldest, then goes on).
  int64_t max_inflight_bytes = int64_t{128} << 20;
};

class FullyShardedModule : public std::enable_shared_from_this<FullyShardedModule> {
 public:
  FullyShardedModule(std::shared_ptr<::torch::nn::Module> unit, const FullyShardOptions& options = {});
  ~FullyShardedModule();
  FullyShardedModule(const FullyShardedModule&) = delete;
  FullyShardedModule& operator=(const FullyShardedModule&) = delete;

  // The shards, in the order of the unit's named_parameters() (managed ones).
  std::vector<at::Tensor> shards() const;
  ::torch::OrderedDict<std::string, at::Tensor> named_shards() const;
  std::shared_ptr<::torch::nn::Module> module() const { return unit_; }
  const FullyShardOptions& options() const { return options_; }

  // The unit's own forward (fully_shard() sets it when the unit has a plain
  // forward): unshard, forward, after_forward. R: its return type.
  template <class R = at::Tensor, class... Args>
  R forward(Args&&... args) {
    check_forward();
    return run([&] { return forward_.template forward<R>(std::forward<Args>(args)...); });
  }
  // unshard, fn(), after_forward(the tensors fn returned: a tensor, a vector or
  // a tuple of them).
  template <class F>
  auto run(F&& fn) {
    unshard();
    try {
      auto out = fn();
      after_forward(output_tensors(out));
      return out;
    } catch (...) {
      reshard();
      throw;
    }
  }
  void set_forward(::torch::nn::AnyModule forward) { forward_ = std::move(forward); }

  // Gathers the full parameters into the unit's parameter tensors (collective).
  void unshard();
  // Frees them: the parameters hold empty tensors again.
  void reshard();
  // After the unit's forward: hooks `outputs` (the pre-backward gather) when
  // grad mode is on; reshards if reshard_after_forward or grad mode is off.
  void after_forward(const std::vector<at::Tensor>& outputs);

  // Finishes the gradient reductions into the shards' grad (collective; call
  // after the backward passes and before the optimizer's step).
  void synchronize();
  // synchronize(), then optimizer.step().
  void step(::torch::optim::Optimizer& optimizer);
  // The shards' gradients: undefined (set_to_none) or zeroed.
  void zero_grad(bool set_to_none = true);

  // ---- checkpoints ----
  // Collective over the set: the full parameters, by the unit's parameter names.
  ::torch::OrderedDict<std::string, at::Tensor> gather_full_parameters();
  // Full parameters (gather_full_parameters() of a unit on any number of ranks,
  // or an unsharded module's named_parameters()) into the shards. Not a
  // collective. strict: every managed parameter must be there.
  void load_full(const ::torch::OrderedDict<std::string, at::Tensor>& full, bool strict = true);

 private:
  class GradHook;
  struct Context;
  struct Param;
  struct Pending;

  void check_layout(const std::vector<std::pair<std::string, at::Tensor>>& params);
  void check_forward() const;
  void gather(const std::vector<size_t>& which);
  void start_gather();
  void finish_gathers();
  static void end_pass(Context& ctx);
  void free_param(Param& p);
  void pre_backward();
  void on_gradient_ready(size_t i);
  void send(Param& p, const at::Tensor& grad);
  void finish(Pending& pending);
  void bound_inflight();

  static std::vector<at::Tensor> output_tensors(const at::Tensor& t) { return {t}; }
  static std::vector<at::Tensor> output_tensors(const std::vector<at::Tensor>& v) { return v; }
  template <class... T>
  static std::vector<at::Tensor> output_tensors(const std::tuple<T...>& t) {
    std::vector<at::Tensor> out;
    std::apply(
        [&](const auto&... x) {
          (
              [&] {
                if constexpr (std::is_same_v<std::decay_t<decltype(x)>, at::Tensor>) out.push_back(x);
              }(),
              ...);
        },
        t);
    return out;
  }
  template <class T>
  static std::vector<at::Tensor> output_tensors(const T&) {
    return {};
  }

  std::shared_ptr<::torch::nn::Module> unit_;
  FullyShardOptions options_;
  ::torch::nn::AnyModule forward_;
  std::string prefix_;  // of the collectives' names
  int n_ = 1, r_ = 0;
  std::vector<int> set_ranks_;
  std::vector<Param> params_;
  std::vector<Pending> inflight_;
  int64_t inflight_bytes_ = 0;
  std::shared_ptr<Context> ctx_;    // shared by the units on the same set
  bool forward_with_grad_ = false;  // this pass ran the forward with grad mode on
};

namespace detail {
template <class M, class = void>
struct HasPlainForward : std::false_type {};
template <class M>
struct HasPlainForward<M, std::void_t<decltype(&M::forward)>> : std::true_type {};
}  // namespace detail

// Shards `unit` (a collective over options.process_set); its forward() is the
// unit's when that forward is a plain (non-template) member function.
template <class M>
std::shared_ptr<FullyShardedModule> fully_shard(std::shared_ptr<M> unit, const FullyShardOptions& options = {}) {
  auto fsm = std::make_shared<FullyShardedModule>(std::static_pointer_cast<::torch::nn::Module>(unit), options);
  if constexpr (!std::is_same_v<M, ::torch::nn::Module> && detail::HasPlainForward<M>::value) {
    fsm->set_forward(::torch::nn::AnyModule(unit));
  }
  return fsm;
}
template <class M>
std::shared_ptr<FullyShardedModule> fully_shard(const ::torch::nn::ModuleHolder<M>& unit,
                                                const FullyShardOptions& options = {}) {
  return fully_shard(unit.ptr(), options);
}

}  // namespace torch
}  // namespace horovodlite
