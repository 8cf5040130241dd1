// ZeroRedundancyOptimizer: sharded data parallelism, stages 1 and 2 of ZeRO, the
// LibTorch twin of Python's hvd.ZeroRedundancyOptimizer (horovodlite/torch/zero.py).
//
// Every rank keeps the whole parameters (as plain data parallelism) but only its
// shard of the optimizer state and, at stage 2, of the gradients. Each parameter
// is sharded on its own, elementwise: its flattened values are padded to a
// multiple of the set's size N and set rank r owns the r-th of N equal chunks
// (equal chunks are what the core's reducescatter hands out). The wrapped
// optimizer is built by `make` over the shards (one param group per group given
// here, with that group's options), so it must be elementwise: SGD, Adam, AdamW,
// RMSprop, Adagrad (LBFGS is refused).
//
// A step:
//  - stage 2 (default): a hook on each parameter's grad accumulator starts the
//    reducescatter of its gradient as soon as backward has produced it (on the
//    backward_passes_per_step-th pass) and drops the full gradient (p.grad is
//    undefined afterwards; the core frees its copy once it has reduced it). When
//    more than max_inflight_bytes of gradients are in flight the hook waits for
//    the oldest, so that a backward faster than the network cannot hold them all;
//  - stage 1: gradients stay in p.grad (the local, unreduced sum) and are
//    reducescattered together at step(), at most 64 MiB in flight at once;
//  - step() = synchronize() (sends what no hook sent: a parameter without a
//    gradient on a rank counts as a zero gradient, as in DistributedOptimizer),
//    then refreshes the shards from the parameters (so a parameter changed
//    between steps is what is stepped: by broadcast_parameters, or by
//    torch::load(module, path), which gives the parameters new storage; that is
//    why the shards are copies here, where Python's are views), steps the
//    wrapped optimizer on the shards and allgathers the updated shards back into
//    the parameters, 64 MiB at a time.
// Parameters that do not require grad (or have no elements) are not sharded and
// never change. Collectives are named "ZeroRedundancyOptimizer.<set>.<k>.<i>..."
// (k counts the optimizers made on the set, i the parameter's index), so the
// parameters' names may differ across ranks; they only appear in messages.
//
// Construction is collective over the process set: every rank's parameter list
// (count, and each one's shape, dtype, sparse, contiguous, requires_grad) is
// gathered, and if they differ every rank throws the same HorovodError naming the
// parameter (its index and name) and the ranks.
//
// Checkpoints (the optimizers whose state is known: SGD, Adam, AdamW, RMSprop,
// Adagrad; another state type is a clear error naming the optimizer and the
// parameter):
//  - consolidated: consolidate_state_dict(to) (collective) gathers the full-size
//    state on set member `to` (a global rank); save() there writes it in the
//    wrapped optimizer's own format over the full parameters, i.e. exactly what
//    torch::save(opt, path) writes for that optimizer type built over the same
//    parameter list: torch::load(plain_adam, path) reads it, and load() reads
//    such a file (or archive) on any number of ranks (not a collective);
//  - sharded: save_sharded(dir) writes dir/rank<r>.pt (r: the set rank) and, on
//    set rank 0, dir/index.json ({"format", "world", "files"}); not a collective
//    (synchronize the ranks, e.g. barrier(), before reading the files).
//    load_sharded(dir) reads them on any number of ranks (each rank opens only
//    the files that overlap its shards). rank<r>.pt is a torch::serialize archive:
//      format       "horovodlite.ZeroRedundancyOptimizer.sharded/1"
//      optimizer    "SGD" | "Adam" | "AdamW" | "RMSprop" | "Adagrad"
//      world, rank  int: the saving set's size and this file's set rank
//      params       int: parameters in all param groups
//      options/size, options/<g>   each param group's options (their serialize())
//      state/<i>    for each parameter index i with state: shape (int64 tensor),
//                   start, stop (int: the flat range this rank held) and state
//                   (the optimizer's param state, serialize(), its tensors cut to
//                   the range: stop - start elements, flat).
#pragma once

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "horovodlite/common.h"
#include "horovodlite/process_set.h"
#include "horovodlite/torch/async_handle.h"
#include "horovodlite/torch/compat.h"
#include "horovodlite/torch/optimizer.h"

namespace horovodlite {
namespace torch {

struct ZeroOptions {
  // 2: gradients sharded (reduced as backward produces them, then dropped);
  // 1: only the optimizer state is sharded (gradients reduced at step()).
  int stage = 2;
  // kFp16 (kBf16): floating gradients are reducescattered as float16 (bfloat16)
  // and cast back.
  Compression compression = Compression::kNone;
  // Backward passes accumulated locally per step.
  int backward_passes_per_step = 1;
  // kAverage or kSum over the set's ranks.
  ReduceOp op = ReduceOp::kAverage;
  // The ranks that share the model; only they make and step this optimizer.
  ProcessSet process_set;
  // Stage 2: the full-size gradients waiting for their reducescatter, at most
  // (the gradient-ready hook waits for the oldest beyond it; 0: for each one).
  int64_t max_inflight_bytes = int64_t{128} << 20;
};

class ZeroRedundancyOptimizer {
 public:
  using ParamGroups = std::vector<::torch::optim::OptimizerParamGroup>;
  // Builds the wrapped optimizer over the param groups it is given (the shards,
  // or the full parameters for checkpoints), e.g.
  //   [](ParamGroups g) { return std::make_shared<torch::optim::Adam>(std::move(g), torch::optim::AdamOptions(1e-3)); }
  using MakeOptimizer = std::function<std::shared_ptr<::torch::optim::Optimizer>(ParamGroups)>;

  // Names (module->named_parameters()) are used in messages only.
  ZeroRedundancyOptimizer(const NamedTensors& named_parameters, MakeOptimizer make, const ZeroOptions& options = {});
  ZeroRedundancyOptimizer(const ::torch::OrderedDict<std::string, at::Tensor>& named_parameters, MakeOptimizer make,
                          const ZeroOptions& options = {});
  ZeroRedundancyOptimizer(const std::vector<at::Tensor>& parameters, MakeOptimizer make,
                          const ZeroOptions& options = {});
  // Several param groups; each group's options (if any) go to its shards' group.
  ZeroRedundancyOptimizer(const ParamGroups& param_groups, MakeOptimizer make, const ZeroOptions& options = {});
  ~ZeroRedundancyOptimizer();

  ZeroRedundancyOptimizer(const ZeroRedundancyOptimizer&) = delete;
  ZeroRedundancyOptimizer& operator=(const ZeroRedundancyOptimizer&) = delete;

  // ZeroRedundancyOptimizer::make<torch::optim::Adam>(params, torch::optim::AdamOptions(1e-3), options)
  template <class Optimizer, class Params, class Options>
  static std::unique_ptr<ZeroRedundancyOptimizer> make(const Params& params, const Options& defaults,
                                                       const ZeroOptions& options = {}) {
    return std::make_unique<ZeroRedundancyOptimizer>(
        params, [defaults](ParamGroups groups) { return std::make_shared<Optimizer>(std::move(groups), defaults); },
        options);
  }

  // synchronize(), then steps the shards and gathers them into the parameters.
  at::Tensor step(::torch::optim::Optimizer::LossClosure closure = nullptr);
  // Finishes this step's gradient reduction (starting what no hook started):
  // collective. step() and clip_grad_norm() call it.
  void synchronize();
  // Throws if gradient reductions are in flight (call step() or synchronize()).
  void zero_grad(bool set_to_none = true);
  // Clips the shards' gradients by their norm over all shards (FSDP's
  // clip_grad_norm_): the allreduced sum of |g|^p (max for p = inf), in double.
  // Call after backward and before step(); returns the total norm. Collective.
  double clip_grad_norm(double max_norm, double norm_type = 2.0);

  // The wrapped optimizer over the shards (its param groups' options: lr, ...).
  ::torch::optim::Optimizer& optimizer() { return *inner_; }
  const ZeroOptions& options() const { return options_; }
  // The shard of parameter `index` (its position in all groups) that this rank
  // steps: chunk elements, the last of them padding; undefined if not sharded.
  at::Tensor shard(size_t index) const;

  // ---- checkpoints ----
  // Collective over the set: gathers the full-size state on global rank `to`.
  void consolidate_state_dict(int to = 0);
  // On the rank consolidated to, while no step has been taken since: the state
  // in the wrapped optimizer's own format (torch::save's layout).
  void save(::torch::serialize::OutputArchive& archive) const;
  void save(const std::string& path) const;
  // A consolidated state, or the one a plain optimizer of the same type over the
  // same parameter list saved; any number of ranks. Not a collective.
  void load(::torch::serialize::InputArchive& archive);
  void load(const std::string& path);
  void save_sharded(const std::string& dir) const;
  void load_sharded(const std::string& dir);

 private:
  class GradHook;
  struct Shard;
  struct Pending;
  struct Consolidated;

  void init(const ParamGroups& groups, const std::vector<std::string>& names, MakeOptimizer make);
  void check_layout(const ParamGroups& groups, const std::vector<std::string>& names);
  ParamGroups full_groups() const;
  std::string where(size_t index) const;
  void on_gradient_ready(size_t shard);
  void send(Shard& shard);
  void finish(Pending& pending);
  void drain(int64_t limit_bytes);
  void drain_oldest();  // finishes the oldest reduction in flight
  void gather_params();
  void replace_state(std::vector<std::pair<size_t, std::unique_ptr<::torch::optim::OptimizerParamState>>> states,
                     const std::vector<std::unique_ptr<::torch::optim::OptimizerOptions>>& options);

  ZeroOptions options_;
  MakeOptimizer make_;
  std::string prefix_;  // of the collectives' names
  int n_ = 1;           // the set's size
  int r_ = 0;           // this rank in the set
  std::vector<int> set_ranks_;
  std::vector<std::vector<at::Tensor>> groups_;  // the full parameters, as given
  std::vector<std::string> names_;               // per parameter index; may be empty
  std::vector<Shard> shards_;                    // in parameter order
  std::vector<Pending> inflight_;
  int64_t inflight_bytes_ = 0;  // the inputs of inflight_
  std::shared_ptr<::torch::optim::Optimizer> inner_;
  std::unique_ptr<Consolidated> consolidated_;
  std::mutex mu_;
  bool reduced_ = false;  // gradients already reduced this step
  int64_t steps_ = 0;
};

}  // namespace torch
}  // namespace horovodlite
