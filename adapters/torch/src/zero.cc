#include "horovodlite/torch/zero.h"

#include <c10/util/Type.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/lbfgs.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "horovodlite/torch/basics.h"
#include "horovodlite/torch/collectives.h"
#include "horovodlite/torch/error.h"
#include "shard_layout.h"

namespace horovodlite {
namespace torch {

using ::torch::optim::Optimizer;
using ::torch::optim::OptimizerOptions;
using ::torch::optim::OptimizerParamState;
using ::torch::serialize::InputArchive;
using ::torch::serialize::OutputArchive;

namespace {

constexpr char kWhat[] = "ZeroRedundancyOptimizer";
constexpr std::chrono::milliseconds kBoundWait{200};

// hvd::init() keeps freed memory for reuse (HOROVODLITE_KEEP_FREED_MEMORY:
// glibc's malloc without mmap for large blocks and without trimming), which
// keeps every block a step frees with the process: a sharded optimizer's saving
// would stay in the heap (docs/sharding.md). So the optimizer gives glibc its
// own policy back, unless that variable is set or the user tuned malloc, as
// Python's hvd.zero.return_freed_memory() does.
void return_freed_memory() {
  if (std::getenv("HOROVODLITE_KEEP_FREED_MEMORY") != nullptr) return;
  for (const char* v : {"MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_"}) {
    if (std::getenv(v) != nullptr) return;
  }
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc") != nullptr) return;
#if defined(__GLIBC__)
  mallopt(M_MMAP_MAX, 65536);
  mallopt(M_TRIM_THRESHOLD, 128 * 1024);
#endif
}
constexpr char kShardedFormat[] = "horovodlite.ZeroRedundancyOptimizer.sharded/1";
constexpr char kIndexFile[] = "index.json";
constexpr char kTooManyPasses[] =
    "Gradients were computed more than backward_passes_per_step times before call to step(). "
    "Increase backward_passes_per_step to accumulate gradients locally.";

// Bytes of allgathered parameters (or of reducescattered gradients at stage 1's
// step) in flight at once: enough to fill the core's fusion buffer several
// times, small next to a model that needs sharding.
constexpr int64_t kWindowBytes = int64_t{64} << 20;

// Optimizers made per process set (id -> count): names their collectives alike
// on every rank of the set (other ranks may make other optimizers meanwhile).
std::mutex instances_mu;
std::map<int32_t, int64_t> instances;

using shard_layout::ranks_text;
using shard_layout::shape_text;

std::string type_name(const Optimizer& optimizer) { return c10::demangle(typeid(optimizer).name()); }

// The optimizers whose per-parameter state is known to be elementwise: how to
// make an empty state and where its tensors are (the rest, step counters, are
// copied as they are).
struct StateKind {
  const char* name;
  std::function<bool(const Optimizer&)> is;
  std::function<std::unique_ptr<OptimizerParamState>()> make;
  std::function<std::vector<std::pair<const char*, at::Tensor*>>(OptimizerParamState&)> tensors;
};

template <class O, class S, class Fields>
StateKind state_kind(const char* name, Fields fields) {
  return {name, [](const Optimizer& o) { return dynamic_cast<const O*>(&o) != nullptr; },
          [] { return std::make_unique<S>(); },
          [fields](OptimizerParamState& s) { return fields(dynamic_cast<S&>(s)); }};
}

const std::vector<StateKind>& state_kinds() {
  namespace optim = ::torch::optim;
  using Fields = std::vector<std::pair<const char*, at::Tensor*>>;
  static const std::vector<StateKind> kinds = {
      state_kind<optim::SGD, optim::SGDParamState>("SGD",
                                                   [](optim::SGDParamState& s) {
                                                     return Fields{{"momentum_buffer", &s.momentum_buffer()}};
                                                   }),
      state_kind<optim::Adam, optim::AdamParamState>("Adam",
                                                     [](optim::AdamParamState& s) {
                                                       return Fields{{"exp_avg", &s.exp_avg()},
                                                                     {"exp_avg_sq", &s.exp_avg_sq()},
                                                                     {"max_exp_avg_sq", &s.max_exp_avg_sq()}};
                                                     }),
      state_kind<optim::AdamW, optim::AdamWParamState>("AdamW",
                                                       [](optim::AdamWParamState& s) {
                                                         return Fields{{"exp_avg", &s.exp_avg()},
                                                                       {"exp_avg_sq", &s.exp_avg_sq()},
                                                                       {"max_exp_avg_sq", &s.max_exp_avg_sq()}};
                                                       }),
      state_kind<optim::RMSprop, optim::RMSpropParamState>("RMSprop",
                                                           [](optim::RMSpropParamState& s) {
                                                             return Fields{{"square_avg", &s.square_avg()},
                                                                           {"momentum_buffer", &s.momentum_buffer()},
                                                                           {"grad_avg", &s.grad_avg()}};
                                                           }),
      state_kind<optim::Adagrad, optim::AdagradParamState>("Adagrad",
                                                           [](optim::AdagradParamState& s) {
                                                             return Fields{{"sum", &s.sum()}};
                                                           }),
  };
  return kinds;
}

const StateKind* find_kind(const Optimizer& optimizer) {
  for (const StateKind& k : state_kinds()) {
    if (k.is(optimizer)) return &k;
  }
  return nullptr;
}

// Waits for every handle, then throws the first failure (none stays in flight).
std::vector<at::Tensor> synchronize_all(const std::vector<AsyncHandle>& handles) {
  std::vector<at::Tensor> out;
  std::unique_ptr<HorovodError> first;
  for (const AsyncHandle& h : handles) {
    try {
      out.push_back(h.synchronize());
    } catch (const HorovodError& e) {
      if (!first) first = std::make_unique<HorovodError>(e);
      out.emplace_back();
    }
  }
  if (first) throw *first;
  return out;
}

HorovodError precondition(const std::string& message) { return HorovodError(StatusCode::kPrecondition, message); }

// Writes through a temporary file, so that a reader never sees half a file.
template <typename Write>
void write_atomically(const std::string& path, Write write) {
  const std::string tmp = path + ".tmp";
  write(tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw HorovodError(StatusCode::kInternal, std::string(kWhat) + ": cannot write " + path);
  }
}

int64_t read_int(InputArchive& archive, const std::string& key) {
  c10::IValue v;
  archive.read(key, v);
  return v.toInt();
}

}  // namespace

// One parameter's sharding: its chunk of the flattened, padded parameter.
struct ZeroRedundancyOptimizer::Shard {
  size_t index = 0;  // the parameter's position in all groups
  at::Tensor param;
  at::Tensor local;  // chunk elements: [start, stop) of the flat parameter, then zeros
  int64_t numel = 0, chunk = 0, start = 0, stop = 0;
  std::string name;  // of its collectives
  compat::NodeHandle grad_accumulator;
  uintptr_t hook_key = 0;
  int passes = 0;     // backward passes seen this step
  bool sent = false;  // its reduction has started this step

  // Copies this rank's chunk of the parameter into the shard.
  void refresh() const {
    const int64_t k = stop - start;
    if (k > 0) local.narrow(0, 0, k).copy_(param.detach().reshape({-1}).narrow(0, start, k));
  }
};

struct ZeroRedundancyOptimizer::Pending {
  size_t shard;
  AsyncHandle handle;
  int64_t bytes;
};

struct ZeroRedundancyOptimizer::Consolidated {
  int to;
  int64_t steps;
  std::shared_ptr<Optimizer> full;  // on `to` only: the full-size state
};

// Runs after a parameter's AccumulateGrad node has accumulated into .grad.
class ZeroRedundancyOptimizer::GradHook : public ::torch::autograd::FunctionPostHook {
 public:
  GradHook(ZeroRedundancyOptimizer* owner, size_t shard) : owner_(owner), shard_(shard) {}
  ::torch::autograd::variable_list operator()(const ::torch::autograd::variable_list& outputs,
                                              const ::torch::autograd::variable_list& /*inputs*/) override {
    owner_->on_gradient_ready(shard_);
    return outputs;
  }

 private:
  ZeroRedundancyOptimizer* owner_;
  size_t shard_;
};

// ------------------------------------------------------------ construction ----

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(const NamedTensors& named_parameters, MakeOptimizer make,
                                                 const ZeroOptions& options)
    : options_(options) {
  std::vector<at::Tensor> tensors;
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const auto& item : named_parameters) {
    check_argument(seen.insert(item.first).second,
                   std::string(kWhat) + ": parameter names must be unique; '" + item.first + "' appears twice");
    names.push_back(item.first);
    tensors.push_back(item.second);
  }
  ParamGroups groups;
  groups.emplace_back(std::move(tensors));
  init(groups, names, std::move(make));
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(const ::torch::OrderedDict<std::string, at::Tensor>& named_parameters,
                                                 MakeOptimizer make, const ZeroOptions& options)
    : ZeroRedundancyOptimizer(named_parameters.pairs(), std::move(make), options) {}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(const std::vector<at::Tensor>& parameters, MakeOptimizer make,
                                                 const ZeroOptions& options)
    : options_(options) {
  ParamGroups groups;
  groups.emplace_back(parameters);
  init(groups, {}, std::move(make));
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(const ParamGroups& param_groups, MakeOptimizer make,
                                                 const ZeroOptions& options)
    : options_(options) {
  init(param_groups, {}, std::move(make));
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() {
  for (Shard& sh : shards_) {
    if (sh.grad_accumulator) sh.grad_accumulator->del_post_hook(sh.hook_key);
  }
  // Their results were the abandoned step's to report; a destructor has nobody to tell.
  for (Pending& p : inflight_) static_cast<void>(p.handle.core_handle()->wait());
}

void ZeroRedundancyOptimizer::init(const ParamGroups& groups, const std::vector<std::string>& names,
                                   MakeOptimizer make) {
  const std::string what = kWhat;
  return_freed_memory();
  check_argument(options_.stage == 1 || options_.stage == 2,
                 what + ": stage must be 1 or 2, got " + std::to_string(options_.stage) +
                     (options_.stage == 3 ? " (stage 3 is not built in C++ yet)" : ""));
  check_argument(options_.backward_passes_per_step >= 1, what + ": backward_passes_per_step must be >= 1, got " +
                                                             std::to_string(options_.backward_passes_per_step));
  check_argument(options_.op == ReduceOp::kAverage || options_.op == ReduceOp::kSum,
                 what + ": op must be Average or Sum, got " + reduce_op_name(options_.op));
  check_argument(options_.compression == Compression::kNone || options_.compression == Compression::kFp16 ||
                     options_.compression == Compression::kBf16,
                 what + ": compression must be kNone, kFp16 or kBf16");
  check_argument(options_.max_inflight_bytes >= 0,
                 what + ": max_inflight_bytes must be >= 0, got " + std::to_string(options_.max_inflight_bytes));
  check_argument(static_cast<bool>(make), what + ": the function that makes the optimizer is empty");
  const ProcessSet& ps = options_.process_set;
  check_argument(ps.included(), what + ": rank " + std::to_string(rank()) + " is not in process set " +
                                    std::to_string(ps.id()) + "; make the optimizer on the set's ranks only");
  make_ = std::move(make);
  n_ = ps.size();
  r_ = ps.rank();
  set_ranks_ = ps.ranks();
  {
    std::lock_guard<std::mutex> lock(instances_mu);
    prefix_ = what + "." + std::to_string(ps.id()) + "." + std::to_string(instances[ps.id()]++);
  }
  for (const auto& g : groups) groups_.push_back(g.params());
  names_ = names;
  check_layout(groups, names);

  // Local checks, after the layout is known to agree: every rank fails alike.
  std::set<const void*> seen;
  size_t index = 0;
  ParamGroups shard_groups;
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::vector<at::Tensor> locals;
    for (const at::Tensor& p : groups_[g]) {
      check_argument(seen.insert(p.unsafeGetTensorImpl()).second,
                     what + ": " + where(index) + " appears more than once in the param groups");
      if (p.requires_grad() && p.numel() > 0) {
        check_argument(p.is_leaf(), what + ": " + where(index) + " is not a leaf tensor");
        Shard sh;
        sh.index = index;
        sh.param = p;
        sh.numel = p.numel();
        sh.chunk = (sh.numel + n_ - 1) / n_;
        sh.start = std::min(r_ * sh.chunk, sh.numel);
        sh.stop = std::min(sh.start + sh.chunk, sh.numel);
        sh.local = at::zeros({sh.chunk}, p.options().requires_grad(false));
        sh.name = prefix_ + "." + std::to_string(index);
        {
          at::NoGradGuard no_grad;
          sh.refresh();
        }
        locals.push_back(sh.local);
        shards_.push_back(std::move(sh));
      }
      ++index;
    }
    if (groups[g].has_options()) {
      shard_groups.emplace_back(std::move(locals), groups[g].options().clone());
    } else {
      shard_groups.emplace_back(std::move(locals));
    }
  }

  std::vector<std::vector<at::Tensor>> expected;
  for (const auto& g : shard_groups) expected.push_back(g.params());
  inner_ = make_(std::move(shard_groups));
  check_argument(inner_ != nullptr, what + ": the function that makes the optimizer returned null");
  check_argument(dynamic_cast<const ::torch::optim::LBFGS*>(inner_.get()) == nullptr,
                 what +
                     ": LBFGS is not elementwise (its line search and history span all parameters) and cannot "
                     "step shards");
  const auto& made = inner_->param_groups();
  bool same = made.size() == expected.size();
  for (size_t g = 0; same && g < made.size(); ++g) {
    same = made[g].params().size() == expected[g].size();
    for (size_t j = 0; same && j < expected[g].size(); ++j) same = made[g].params()[j].is_same(expected[g][j]);
  }
  check_argument(same, what +
                           ": the optimizer must be made over the param groups the function is given (the "
                           "shards), e.g. std::make_shared<torch::optim::Adam>(std::move(groups), options)");

  if (options_.stage == 2) {
    for (size_t s = 0; s < shards_.size(); ++s) {
      Shard& sh = shards_[s];
      sh.grad_accumulator = ::torch::autograd::impl::grad_accumulator(sh.param);
      sh.hook_key = sh.grad_accumulator->add_post_hook(std::make_unique<GradHook>(this, s));
    }
  }
}

std::string ZeroRedundancyOptimizer::where(size_t index) const {
  std::string out = "parameter " + std::to_string(index);
  if (index < names_.size() && !names_[index].empty()) out += " ('" + names_[index] + "')";
  return out;
}

// Gathers every rank's parameter signatures (one line each: "<signature>\t<name>")
// and raises the same error on every rank if they differ.
void ZeroRedundancyOptimizer::check_layout(const ParamGroups& groups, const std::vector<std::string>& names) {
  std::string mine;
  size_t index = 0;
  for (const auto& g : groups) {
    for (const at::Tensor& p : g.params()) {
      std::string sig;
      if (!p.defined()) {
        sig = "undefined";
      } else {
        sig = "shape " + shape_text(p.sizes()) + " " + c10::toString(p.scalar_type());
        if (p.is_sparse()) {
          sig += " sparse";
        } else if (!p.is_contiguous()) {
          sig += " non-contiguous";
        }
        if (!p.requires_grad()) sig += " (requires_grad false)";
      }
      std::string name = index < names.size() ? names[index] : "";
      std::replace(name.begin(), name.end(), '\n', ' ');
      std::replace(name.begin(), name.end(), '\t', ' ');
      mine += sig + "\t" + name + "\n";
      ++index;
    }
  }
  const shard_layout::Signatures sigs = shard_layout::gather(kWhat, mine, prefix_, options_.process_set, set_ranks_);
  const std::string what = kWhat;
  auto param_text = [&](size_t i) { return shard_layout::param_text(sigs, i); };
  for (size_t i = 0; i < sigs[0].size(); ++i) {
    const std::string& s = sigs[0][i].first;
    const std::string on = " (on " + ranks_text(set_ranks_) + ")";
    if (s == "undefined")
      throw HorovodError(StatusCode::kInvalidArgument, what + ": " + param_text(i) + " is undefined" + on);
    if (s.find(" sparse") != std::string::npos) {
      throw HorovodError(StatusCode::kInvalidArgument, what + ": " + param_text(i) + " is sparse" + on +
                                                           "; sharded optimizers take dense parameters");
    }
    if (s.find(" non-contiguous") != std::string::npos) {
      throw HorovodError(StatusCode::kInvalidArgument, what + ": " + param_text(i) + " is not contiguous" + on +
                                                           "; make it contiguous (p.set_data(p.contiguous())) before "
                                                           "sharding");
    }
  }
}

at::Tensor ZeroRedundancyOptimizer::shard(size_t index) const {
  for (const Shard& sh : shards_) {
    if (sh.index == index) return sh.local;
  }
  return at::Tensor();
}

// ------------------------------------------------------- gradient reduce ----

void ZeroRedundancyOptimizer::on_gradient_ready(size_t s) {
  std::lock_guard<std::mutex> lock(mu_);
  Shard& sh = shards_[s];
  if (++sh.passes > options_.backward_passes_per_step) throw precondition(kTooManyPasses);
  if (sh.passes == options_.backward_passes_per_step && !sh.sent) {
    send(sh);
    // Bounded, but giving way: hooks may fire in another order on another
    // rank, which may be waiting for a gradient this rank has not sent yet;
    // after kBoundWait on the oldest reduction this hook goes on (as Python's
    // _bound_inflight).
    while (!inflight_.empty() && inflight_bytes_ > options_.max_inflight_bytes) {
      if (!inflight_.front().handle.wait_for(kBoundWait)) break;
      drain_oldest();
    }
  }
}

void ZeroRedundancyOptimizer::drain_oldest() {
  Pending p = std::move(inflight_.front());
  inflight_.erase(inflight_.begin());
  inflight_bytes_ -= p.bytes;
  finish(p);
}

// Starts the reducescatter of the shard's gradient (zeros if it has none),
// padded to chunk * n elements; at stage 2 drops p.grad.
void ZeroRedundancyOptimizer::send(Shard& sh) {
  at::NoGradGuard no_grad;
  const int64_t total = sh.chunk * n_;
  at::Tensor grad = sh.param.grad();
  at::Tensor flat;
  if (!grad.defined()) {
    flat = at::zeros({total}, sh.local.options());
  } else {
    if (grad.is_sparse()) {
      throw HorovodError(StatusCode::kInvalidArgument, std::string(kWhat) + ": the gradient of " + where(sh.index) +
                                                           " is sparse on rank " + std::to_string(rank()) +
                                                           "; sharded optimizers take dense gradients");
    }
    flat = grad.reshape({-1});
    if (total > sh.numel) flat = at::cat({flat, at::zeros({total - sh.numel}, flat.options())});
  }
  // The collective keeps its input until the core has reduced it.
  if (options_.stage == 2) sh.param.mutable_grad() = at::Tensor();
  const at::ScalarType wire = shard_layout::compression_wire_type(options_.compression, flat.scalar_type());
  if (wire != flat.scalar_type()) flat = flat.to(wire);
  ReducescatterOptions ro;
  ro.op = options_.op;
  ro.process_set = options_.process_set;
  AsyncHandle handle = reducescatter_async(flat, sh.name, ro);
  const int64_t bytes = flat.numel() * static_cast<int64_t>(flat.element_size());
  inflight_.push_back({static_cast<size_t>(&sh - shards_.data()), std::move(handle), bytes});
  inflight_bytes_ += bytes;
  sh.sent = true;
}

// Adds a finished reduction (this rank's chunk of the reduced gradient) to the
// shard's gradient.
void ZeroRedundancyOptimizer::finish(Pending& p) {
  Shard& sh = shards_[p.shard];
  at::Tensor out = p.handle.synchronize();
  if (out.numel() != sh.chunk) {
    throw HorovodError(StatusCode::kInternal, std::string(kWhat) + ": the reducescatter of " + where(sh.index) +
                                                  " returned " + std::to_string(out.numel()) + " elements, not " +
                                                  std::to_string(sh.chunk));
  }
  at::NoGradGuard no_grad;
  out = out.reshape({sh.chunk});
  if (out.scalar_type() != sh.local.scalar_type()) out = out.to(sh.local.scalar_type());
  at::Tensor& g = sh.local.mutable_grad();
  if (!g.defined()) {
    g = out;
  } else {
    g.add_(out);
  }
}

// Finishes the oldest reductions until at most limit_bytes are in flight (0:
// all); waits for every one it takes even after a failure, throws the first.
void ZeroRedundancyOptimizer::drain(int64_t limit_bytes) {
  std::unique_ptr<HorovodError> first;
  while (!inflight_.empty() && (limit_bytes == 0 || inflight_bytes_ > limit_bytes)) {
    Pending p = std::move(inflight_.front());
    inflight_.erase(inflight_.begin());
    inflight_bytes_ -= p.bytes;
    try {
      finish(p);
    } catch (const HorovodError& e) {
      if (!first) first = std::make_unique<HorovodError>(e);
    }
  }
  if (first) throw *first;
}

void ZeroRedundancyOptimizer::synchronize() {
  std::lock_guard<std::mutex> lock(mu_);
  if (reduced_) return;
  std::unique_ptr<HorovodError> first;
  auto attempt = [&](auto fn) {
    try {
      fn();
    } catch (const HorovodError& e) {
      if (!first) first = std::make_unique<HorovodError>(e);
    }
  };
  for (Shard& sh : shards_) {  // the same order on every rank
    if (!sh.sent) attempt([&] { send(sh); });
    if (options_.stage == 1) attempt([&] { drain(kWindowBytes); });
  }
  attempt([&] { drain(0); });
  for (Shard& sh : shards_) {
    sh.passes = 0;
    sh.sent = false;
  }
  if (first) {
    for (Shard& sh : shards_) sh.local.mutable_grad() = at::Tensor();
    throw *first;
  }
  reduced_ = true;
}

double ZeroRedundancyOptimizer::clip_grad_norm(double max_norm, double norm_type) {
  check_argument(norm_type > 0, std::string(kWhat) + "::clip_grad_norm: norm_type must be positive or infinity, got " +
                                    std::to_string(norm_type));
  synchronize();
  std::lock_guard<std::mutex> lock(mu_);
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  for (const Shard& sh : shards_) {
    if (sh.local.grad().defined()) grads.push_back(sh.local.grad());
  }
  const bool inf = std::isinf(norm_type);
  double local = 0;
  for (const at::Tensor& g : grads) {
    at::Tensor d = g.to(at::kDouble);
    if (inf) {
      local = std::max(local, d.abs().max().item<double>());
    } else {
      local += d.abs().pow(norm_type).sum().item<double>();
    }
  }
  AllreduceOptions ar;
  ar.op = inf ? ReduceOp::kMax : ReduceOp::kSum;
  ar.process_set = options_.process_set;
  const double reduced = allreduce(at::full({1}, local, at::kDouble), prefix_ + ".norm", ar).item<double>();
  const double total = inf ? reduced : std::pow(reduced, 1.0 / norm_type);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0) {
    for (const at::Tensor& g : grads) g.mul_(coef);
  }
  return total;
}

// ------------------------------------------------------------------ step ----

at::Tensor ZeroRedundancyOptimizer::step(Optimizer::LossClosure closure) {
  at::Tensor loss;
  if (closure) {
    at::AutoGradMode grad(true);
    loss = closure();
  }
  synchronize();
  std::lock_guard<std::mutex> lock(mu_);
  {
    at::NoGradGuard no_grad;
    for (const Shard& sh : shards_) sh.refresh();
  }
  inner_->step();
  for (Shard& sh : shards_) sh.local.mutable_grad() = at::Tensor();
  reduced_ = false;
  ++steps_;
  gather_params();
  return loss;
}

// Allgathers the updated shards into the parameters, at most kWindowBytes of
// gathered parameters at a time.
void ZeroRedundancyOptimizer::gather_params() {
  std::vector<size_t> which;
  std::vector<AsyncHandle> handles;
  std::unique_ptr<HorovodError> first;
  auto write_back = [&] {
    std::vector<at::Tensor> full;
    try {
      full = synchronize_all(handles);
    } catch (const HorovodError& e) {
      if (!first) first = std::make_unique<HorovodError>(e);
    }
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < full.size(); ++i) {
      const Shard& sh = shards_[which[i]];
      sh.param.detach().view({-1}).copy_(full[i].reshape({-1}).narrow(0, 0, sh.numel));
    }
    which.clear();
    handles.clear();
  };
  int64_t bytes = 0;
  for (size_t s = 0; s < shards_.size(); ++s) {
    const Shard& sh = shards_[s];
    which.push_back(s);
    handles.push_back(allgather_async(sh.local, sh.name + ".params", options_.process_set));
    bytes += sh.chunk * n_ * static_cast<int64_t>(sh.local.element_size());
    if (bytes >= kWindowBytes) {
      write_back();
      bytes = 0;
    }
  }
  write_back();
  if (first) throw *first;
}

void ZeroRedundancyOptimizer::zero_grad(bool set_to_none) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!inflight_.empty()) {
    throw precondition(std::string(kWhat) +
                       "::zero_grad() was called after backward() but before step() or synchronize(); this is "
                       "prohibited as it races with the gradient reductions");
  }
  at::NoGradGuard no_grad;
  for (const auto& group : groups_) {
    for (const at::Tensor& p : group) {
      at::Tensor& g = p.mutable_grad();
      if (!g.defined()) continue;
      if (set_to_none) {
        g = at::Tensor();
      } else {
        g = g.detach();
        g.zero_();
      }
    }
  }
  for (Shard& sh : shards_) {
    sh.local.mutable_grad() = at::Tensor();
    sh.passes = 0;
    sh.sent = false;
  }
  reduced_ = false;
}

// ------------------------------------------------------------ checkpoints ----

// The wrapped optimizer's type over the full parameters (the user's groups),
// with the shards' current options: what a plain optimizer's save()/load() use.
ZeroRedundancyOptimizer::ParamGroups ZeroRedundancyOptimizer::full_groups() const {
  ParamGroups groups;
  for (const auto& g : groups_) groups.emplace_back(g);
  return groups;
}

namespace {

std::shared_ptr<Optimizer> make_full(const ZeroRedundancyOptimizer::MakeOptimizer& make,
                                     ZeroRedundancyOptimizer::ParamGroups groups, const Optimizer& inner) {
  std::vector<size_t> sizes;
  for (const auto& g : groups) sizes.push_back(g.params().size());
  std::shared_ptr<Optimizer> full = make(std::move(groups));
  bool same = full != nullptr && full->param_groups().size() == sizes.size();
  for (size_t g = 0; same && g < sizes.size(); ++g) same = full->param_groups()[g].params().size() == sizes[g];
  check_argument(same, std::string(kWhat) +
                           ": the function that makes the optimizer must build it over the param "
                           "groups it is given");
  // The shards' options as they are now (set after construction: an optimizer's
  // constructor merges a group's options with its defaults).
  for (size_t g = 0; g < sizes.size(); ++g)
    full->param_groups()[g].set_options(inner.param_groups()[g].options().clone());
  return full;
}

}  // namespace

void ZeroRedundancyOptimizer::replace_state(std::vector<std::pair<size_t, std::unique_ptr<OptimizerParamState>>> states,
                                            const std::vector<std::unique_ptr<OptimizerOptions>>& options) {
  auto& live = inner_->state();
  live.clear();
  for (auto& item : states) live[compat::optimizer_state_key(shards_[item.first].local)] = std::move(item.second);
  auto& groups = inner_->param_groups();
  for (size_t g = 0; g < groups.size() && g < options.size(); ++g) groups[g].set_options(options[g]->clone());
  consolidated_.reset();
}

void ZeroRedundancyOptimizer::consolidate_state_dict(int to) {
  const std::string what = std::string(kWhat) + "::consolidate_state_dict";
  check_argument(std::find(set_ranks_.begin(), set_ranks_.end(), to) != set_ranks_.end(),
                 what + ": rank " + std::to_string(to) + " is not in the process set (" + ranks_text(set_ranks_) + ")");
  std::lock_guard<std::mutex> lock(mu_);
  const bool here = rank() == to;
  std::shared_ptr<Optimizer> full = here ? make_full(make_, full_groups(), *inner_) : nullptr;
  if (full) full->state().clear();  // Adagrad makes its state in its constructor
  const StateKind* kind = find_kind(*inner_);
  for (const Shard& sh : shards_) {
    auto it = inner_->state().find(compat::optimizer_state_key(sh.local));
    if (it == inner_->state().end()) continue;
    check_argument(kind != nullptr, what + ": the state of " + where(sh.index) + " is " + type_name(*inner_) +
                                        "'s, which is not known to be elementwise (checkpoints support SGD, Adam, "
                                        "AdamW, RMSprop and Adagrad)");
    std::unique_ptr<OptimizerParamState> copy = here ? it->second->clone() : nullptr;
    auto fields = kind->tensors(*it->second);
    std::vector<AsyncHandle> handles;
    for (const auto& f : fields) {
      if (!f.second->defined()) continue;
      check_argument(f.second->numel() == sh.chunk,
                     what + ": state '" + f.first + "' of " + where(sh.index) + " has shape " +
                         shape_text(f.second->sizes()) + ", not the shard's [" + std::to_string(sh.chunk) +
                         "]: " + type_name(*inner_) + " is not elementwise and cannot be sharded");
      handles.push_back(allgather_async(f.second->reshape({-1}), sh.name + ".state." + f.first, options_.process_set));
    }
    std::vector<at::Tensor> gathered = synchronize_all(handles);
    if (!here) continue;
    auto copy_fields = kind->tensors(*copy);
    size_t k = 0;
    for (auto& f : copy_fields) {
      if (!f.second->defined()) continue;
      *f.second = gathered[k++].narrow(0, 0, sh.numel).reshape(sh.param.sizes()).clone();
    }
    full->state()[compat::optimizer_state_key(sh.param)] = std::move(copy);
  }
  consolidated_ = std::make_unique<Consolidated>(Consolidated{to, steps_, std::move(full)});
}

void ZeroRedundancyOptimizer::save(OutputArchive& archive) const {
  const std::string what = std::string(kWhat) + "::save() on rank " + std::to_string(rank());
  if (!consolidated_) {
    throw precondition(what + ": the state has not been consolidated; call consolidate_state_dict(" +
                       std::to_string(rank()) + ") on every rank of the set first");
  }
  const int to = consolidated_->to;
  if (!consolidated_->full) {
    throw precondition(what + ": the state was consolidated on rank " + std::to_string(to) +
                       " (consolidate_state_dict(" + std::to_string(to) +
                       ")); save it there, or consolidate with to=" + std::to_string(rank()));
  }
  if (consolidated_->steps != steps_) {
    throw precondition(what + ": the consolidated state is " + std::to_string(steps_ - consolidated_->steps) +
                       " step(s) old; call consolidate_state_dict(" + std::to_string(to) + ") again");
  }
  consolidated_->full->save(archive);
}

void ZeroRedundancyOptimizer::save(const std::string& path) const {
  OutputArchive archive;
  save(archive);
  write_atomically(path, [&](const std::string& tmp) { archive.save_to(tmp); });
}

void ZeroRedundancyOptimizer::load(InputArchive& archive) {
  const std::string what = std::string(kWhat) + "::load";
  std::lock_guard<std::mutex> lock(mu_);
  // The structure first, for errors that name what differs.
  try {
    InputArchive groups;
    check_argument(archive.try_read("param_groups", groups),
                   what + ": not an optimizer's state (it has no param_groups)");
    at::Tensor count;
    groups.read("param_groups/size", count);
    check_argument(count.item<int64_t>() == static_cast<int64_t>(groups_.size()),
                   what + ": the checkpoint has " + std::to_string(count.item<int64_t>()) +
                       " param group(s), this optimizer " + std::to_string(groups_.size()) +
                       " (a state of another model?)");
    for (size_t g = 0; g < groups_.size(); ++g) {
      InputArchive group;
      groups.read("param_groups/" + std::to_string(g), group);
      at::Tensor size;
      group.read("params/size", size);
      check_argument(size.item<int64_t>() == static_cast<int64_t>(groups_[g].size()),
                     what + ": param group " + std::to_string(g) + " holds " + std::to_string(size.item<int64_t>()) +
                         " parameter(s) in the checkpoint, " + std::to_string(groups_[g].size()) +
                         " here (a state of another model?)");
    }
  } catch (const c10::Error& e) {
    throw HorovodError(StatusCode::kInvalidArgument,
                       what + ": not an optimizer's state: " + e.what_without_backtrace());
  }
  std::shared_ptr<Optimizer> full = make_full(make_, full_groups(), *inner_);
  full->state().clear();
  try {
    full->load(archive);
  } catch (const c10::Error& e) {
    throw HorovodError(StatusCode::kInvalidArgument,
                       what + ": cannot read the checkpoint as " + type_name(*inner_) +
                           "'s state (saved by another optimizer?): " + e.what_without_backtrace());
  }
  const StateKind* kind = find_kind(*inner_);
  std::vector<std::pair<size_t, std::unique_ptr<OptimizerParamState>>> states;
  at::NoGradGuard no_grad;
  for (size_t s = 0; s < shards_.size(); ++s) {
    const Shard& sh = shards_[s];
    auto it = full->state().find(compat::optimizer_state_key(sh.param));
    if (it == full->state().end()) continue;
    check_argument(kind != nullptr, what + ": the state of " + where(sh.index) + " is " + type_name(*inner_) +
                                        "'s, which is not known to be elementwise (checkpoints support SGD, Adam, "
                                        "AdamW, RMSprop and Adagrad)");
    std::unique_ptr<OptimizerParamState> piece = it->second->clone();
    for (auto& f : kind->tensors(*piece)) {
      if (!f.second->defined()) continue;
      const at::Tensor v = *f.second;
      check_argument(v.sizes() == sh.param.sizes(), what + ": state '" + f.first + "' of " + where(sh.index) +
                                                        " has shape " + shape_text(v.sizes()) +
                                                        " in the checkpoint, the parameter " +
                                                        shape_text(sh.param.sizes()) + " (a state of another model?)");
      at::Tensor local = at::zeros({sh.chunk}, v.options().device(sh.local.device()));
      const int64_t k = sh.stop - sh.start;
      if (k > 0) local.narrow(0, 0, k).copy_(v.reshape({-1}).narrow(0, sh.start, k));
      *f.second = local;
    }
    states.emplace_back(s, std::move(piece));
  }
  std::vector<std::unique_ptr<OptimizerOptions>> options;
  for (const auto& g : full->param_groups()) options.push_back(g.options().clone());
  replace_state(std::move(states), options);
}

void ZeroRedundancyOptimizer::load(const std::string& path) {
  InputArchive archive;
  try {
    archive.load_from(path);
  } catch (const c10::Error& e) {
    throw HorovodError(StatusCode::kInvalidArgument,
                       std::string(kWhat) + "::load: cannot read " + path + ": " + e.what_without_backtrace());
  }
  load(archive);
}

void ZeroRedundancyOptimizer::save_sharded(const std::string& dir) const {
  const std::string what = std::string(kWhat) + "::save_sharded";
  const StateKind* kind = find_kind(*inner_);
  OutputArchive archive;
  archive.write("format", c10::IValue(std::string(kShardedFormat)));
  archive.write("optimizer", c10::IValue(std::string(kind ? kind->name : type_name(*inner_))));
  archive.write("world", c10::IValue(static_cast<int64_t>(n_)));
  archive.write("rank", c10::IValue(static_cast<int64_t>(r_)));
  int64_t params = 0;
  for (const auto& g : groups_) params += static_cast<int64_t>(g.size());
  archive.write("params", c10::IValue(params));
  OutputArchive options(archive.compilation_unit());
  const auto& groups = inner_->param_groups();
  options.write("size", c10::IValue(static_cast<int64_t>(groups.size())));
  for (size_t g = 0; g < groups.size(); ++g) {
    OutputArchive o(archive.compilation_unit());
    groups[g].options().serialize(o);
    options.write(std::to_string(g), o);
  }
  archive.write("options", options);
  OutputArchive state(archive.compilation_unit());
  at::NoGradGuard no_grad;
  for (const Shard& sh : shards_) {
    auto it = inner_->state().find(compat::optimizer_state_key(sh.local));
    if (it == inner_->state().end()) continue;
    check_argument(kind != nullptr, what + ": the state of " + where(sh.index) + " is " + type_name(*inner_) +
                                        "'s, which is not known to be elementwise (checkpoints support SGD, Adam, "
                                        "AdamW, RMSprop and Adagrad)");
    std::unique_ptr<OptimizerParamState> cut = it->second->clone();
    for (auto& f : kind->tensors(*cut)) {
      if (!f.second->defined()) continue;
      check_argument(f.second->numel() == sh.chunk,
                     what + ": state '" + f.first + "' of " + where(sh.index) + " has shape " +
                         shape_text(f.second->sizes()) + ", not the shard's [" + std::to_string(sh.chunk) +
                         "]: " + type_name(*inner_) + " is not elementwise and cannot be sharded");
      *f.second = f.second->reshape({-1}).narrow(0, 0, sh.stop - sh.start).cpu().clone();
    }
    OutputArchive piece(archive.compilation_unit());
    piece.write("shape", at::tensor(sh.param.sizes().vec(), at::kLong));
    piece.write("start", c10::IValue(sh.start));
    piece.write("stop", c10::IValue(sh.stop));
    OutputArchive st(archive.compilation_unit());
    cut->serialize(st);
    piece.write("state", st);
    state.write(std::to_string(sh.index), piece);
  }
  archive.write("state", state);

  std::filesystem::create_directories(dir);
  const std::string file = "rank" + std::to_string(r_) + ".pt";
  write_atomically(dir + "/" + file, [&](const std::string& tmp) { archive.save_to(tmp); });
  if (r_ == 0) {
    write_atomically(dir + "/" + kIndexFile, [&](const std::string& tmp) {
      std::ofstream out(tmp);
      out << "{\"format\": \"" << kShardedFormat << "\", \"world\": " << n_ << ", \"files\": [";
      for (int r = 0; r < n_; ++r) out << (r ? ", " : "") << "\"rank" << r << ".pt\"";
      out << "]}\n";
      if (!out) throw HorovodError(StatusCode::kInternal, what + ": cannot write " + tmp);
    });
  }
}

void ZeroRedundancyOptimizer::load_sharded(const std::string& dir) {
  const std::string what = std::string(kWhat) + "::load_sharded";
  int64_t world = 0;
  {
    std::ifstream in(dir + "/" + kIndexFile);
    std::stringstream text;
    text << in.rdbuf();
    const std::string s = text.str();
    const size_t at = s.find("\"world\":");
    if (!in || at == std::string::npos || s.find(kShardedFormat) == std::string::npos ||
        (world = std::strtoll(s.c_str() + at + 8, nullptr, 10)) < 1) {
      throw HorovodError(StatusCode::kInvalidArgument,
                         what + ": " + dir + "/" + kIndexFile + " is missing or is not a sharded checkpoint's index");
    }
  }
  std::map<int64_t, std::unique_ptr<InputArchive>> files;
  auto open = [&](int64_t r) -> InputArchive& {
    auto it = files.find(r);
    if (it != files.end()) return *it->second;
    const std::string path = dir + "/rank" + std::to_string(r) + ".pt";
    auto archive = std::make_unique<InputArchive>();
    try {
      archive->load_from(path);
      c10::IValue format;
      archive->read("format", format);
      check_argument(format.toStringRef() == kShardedFormat, what + ": " + path + " is not a sharded checkpoint");
      check_argument(read_int(*archive, "world") == world && read_int(*archive, "rank") == r,
                     what + ": " + path + " is not rank " + std::to_string(r) + " of " + std::to_string(world) +
                         " (files of another checkpoint?)");
    } catch (const c10::Error& e) {
      throw HorovodError(StatusCode::kInvalidArgument,
                         what + ": cannot read " + path + ": " + e.what_without_backtrace());
    }
    return *files.emplace(r, std::move(archive)).first->second;
  };

  std::lock_guard<std::mutex> lock(mu_);
  const StateKind* kind = find_kind(*inner_);
  std::vector<std::pair<size_t, std::unique_ptr<OptimizerParamState>>> states;
  std::vector<std::unique_ptr<OptimizerOptions>> options;
  try {
    InputArchive& first = open(0);
    int64_t params = 0;
    for (const auto& g : groups_) params += static_cast<int64_t>(g.size());
    const int64_t saved = read_int(first, "params");
    check_argument(saved == params, what + ": the checkpoint holds " + std::to_string(saved) +
                                        " parameter(s), this optimizer " + std::to_string(params) +
                                        " (a state of another model?)");
    c10::IValue saved_kind;
    first.read("optimizer", saved_kind);
    const std::string mine = kind ? kind->name : type_name(*inner_);
    check_argument(saved_kind.toStringRef() == mine,
                   what + ": the checkpoint holds " + saved_kind.toStringRef() + "'s state, this optimizer is " + mine);
    InputArchive saved_options;
    first.read("options", saved_options);
    const auto& groups = inner_->param_groups();
    check_argument(read_int(saved_options, "size") == static_cast<int64_t>(groups.size()),
                   what + ": the checkpoint has " + std::to_string(read_int(saved_options, "size")) +
                       " param group(s), this optimizer " + std::to_string(groups.size()) +
                       " (a state of another model?)");
    for (size_t g = 0; g < groups.size(); ++g) {
      InputArchive o;
      saved_options.read(std::to_string(g), o);
      options.push_back(groups[g].options().clone());
      options.back()->serialize(o);
    }

    InputArchive first_state;
    first.read("state", first_state);
    at::NoGradGuard no_grad;
    for (size_t s = 0; s < shards_.size(); ++s) {
      const Shard& sh = shards_[s];
      const std::string key = std::to_string(sh.index);
      InputArchive meta;
      if (!first_state.try_read(key, meta)) continue;
      at::Tensor shape;
      meta.read("shape", shape);
      std::vector<int64_t> sizes(shape.data_ptr<int64_t>(), shape.data_ptr<int64_t>() + shape.numel());
      check_argument(at::IntArrayRef(sizes) == sh.param.sizes(),
                     what + ": " + where(sh.index) + " has shape " + shape_text(sizes) + " in the checkpoint, " +
                         shape_text(sh.param.sizes()) + " here (a state of another model?)");
      check_argument(kind != nullptr, what + ": the state of " + where(sh.index) + " is " + type_name(*inner_) +
                                          "'s, which is not known to be elementwise");
      // This rank's piece: the saved step counters and so on, and zeros of the
      // chunk's size for each tensor, filled below from the overlapping files.
      std::unique_ptr<OptimizerParamState> piece = kind->make();
      InputArchive st;
      meta.read("state", st);
      piece->serialize(st);
      auto fields = kind->tensors(*piece);
      for (auto& f : fields) {
        if (f.second->defined()) *f.second = at::zeros({sh.chunk}, f.second->options().device(sh.local.device()));
      }
      const int64_t chunk = (sh.numel + world - 1) / world;  // the saving job's ranges follow from its size
      for (int64_t r = 0; r < world; ++r) {
        const int64_t lo = std::min(r * chunk, sh.numel), hi = std::min(lo + chunk, sh.numel);
        const int64_t a = std::max(lo, sh.start), b = std::min(hi, sh.stop);
        if (a >= b) continue;
        InputArchive state_r, meta_r, st_r;
        open(r).read("state", state_r);
        check_argument(state_r.try_read(key, meta_r), what + ": rank" + std::to_string(r) + ".pt has no state for " +
                                                          where(sh.index) + " (files of another checkpoint?)");
        check_argument(read_int(meta_r, "start") == lo && read_int(meta_r, "stop") == hi,
                       what + ": rank" + std::to_string(r) + ".pt holds another range of " + where(sh.index));
        meta_r.read("state", st_r);
        std::unique_ptr<OptimizerParamState> saved_piece = kind->make();
        saved_piece->serialize(st_r);
        auto saved_fields = kind->tensors(*saved_piece);
        for (size_t j = 0; j < fields.size(); ++j) {
          if (!fields[j].second->defined()) continue;
          check_argument(saved_fields[j].second->defined() && saved_fields[j].second->numel() == hi - lo,
                         what + ": rank" + std::to_string(r) + ".pt: state '" + fields[j].first + "' of " +
                             where(sh.index) + " is missing or of the wrong size");
          fields[j].second->narrow(0, a - sh.start, b - a).copy_(saved_fields[j].second->narrow(0, a - lo, b - a));
        }
      }
      states.emplace_back(s, std::move(piece));
    }
  } catch (const c10::Error& e) {
    throw HorovodError(StatusCode::kInvalidArgument,
                       what + ": cannot read the checkpoint in " + dir + ": " + e.what_without_backtrace());
  }
  replace_state(std::move(states), options);
}

}  // namespace torch
}  // namespace horovodlite
