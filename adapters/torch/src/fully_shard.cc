#include "horovodlite/torch/fully_shard.h"

#include <c10/core/StorageImpl.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "horovodlite/torch/basics.h"
#include "horovodlite/torch/collectives.h"
#include "horovodlite/torch/error.h"
#include "shard_layout.h"

namespace horovodlite {
namespace torch {

namespace {

constexpr char kWhat[] = "fully_shard";
// How long the in-flight bound waits for the oldest reduction before going on
// (Python's _BOUND_WAIT_S).
constexpr std::chrono::milliseconds kBoundWait{200};

// Units made per process set (id -> count): names their collectives alike on
// every rank of the set.
std::mutex instances_mu;
std::map<int32_t, int64_t> instances;
// The parameters some unit manages (a later unit on a parent leaves them alone).
std::mutex managed_mu;
std::set<const void*> managed;
// One lock for every unit: a unit's hooks issue other units' gathers.
std::recursive_mutex mu;

using shard_layout::ranks_text;
using shard_layout::shape_text;

// Frees a storage's bytes, keeping the StorageImpl (and so every view of it).
void storage_free(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  if (s->nbytes() == 0) return;
  s->set_data_ptr_noswap(s->allocator()->allocate(0));
  s->set_nbytes(0);
}

// Gives a freed storage its bytes back (contents undefined).
void storage_alloc(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  const size_t nbytes = static_cast<size_t>(t.numel()) * t.element_size();
  if (s->nbytes() >= nbytes) return;
  s->set_data_ptr_noswap(s->allocator()->allocate(nbytes));
  s->set_nbytes(nbytes);
}

}  // namespace

struct FullyShardedModule::Param {
  std::string fqn;
  at::Tensor param;  // the unit's own tensor; its data swapped
  std::vector<int64_t> shape;
  int64_t numel = 0, chunk = 0, start = 0, stop = 0;
  at::Tensor shard;  // stop - start elements
  at::Tensor buf;    // chunk * n elements, the gathered parameter; storage freed at rest
  bool full = false;
  AsyncHandle gathering;
  std::string name;  // of its collectives
  int sends = 0;     // reducescatters this step
  compat::NodeHandle grad_accumulator;
  uintptr_t hook_key = 0;

  at::Tensor padded_shard() const {
    at::Tensor s = shard.detach();
    const int64_t k = stop - start;
    return k == chunk ? s.clone() : at::cat({s, at::zeros({chunk - k}, s.options())});
  }
};

// The units of one process set: the forward order and the backward pass.
struct FullyShardedModule::Context {
  std::vector<FullyShardedModule*> order;  // in the order of their first forward
  bool pass_active = false;
  std::vector<FullyShardedModule*> backward_queue;  // whose backward gathers, in reverse forward order
  size_t issued = 0;                                // of backward_queue
};

namespace {
std::map<int32_t, std::weak_ptr<void>> contexts;  // process set id -> its Context
}  // namespace

struct FullyShardedModule::Pending {
  size_t param;
  AsyncHandle handle;
  int64_t bytes;
};

// Runs after a parameter's AccumulateGrad node has accumulated into .grad.
class FullyShardedModule::GradHook : public ::torch::autograd::FunctionPostHook {
 public:
  GradHook(FullyShardedModule* owner, size_t i) : owner_(owner), i_(i) {}
  ::torch::autograd::variable_list operator()(const ::torch::autograd::variable_list& outputs,
                                              const ::torch::autograd::variable_list& /*inputs*/) override {
    owner_->on_gradient_ready(i_);
    return outputs;
  }

 private:
  FullyShardedModule* owner_;
  size_t i_;
};

// ------------------------------------------------------------ construction ----

FullyShardedModule::FullyShardedModule(std::shared_ptr<::torch::nn::Module> unit, const FullyShardOptions& options)
    : unit_(std::move(unit)), options_(options) {
  const std::string what = kWhat;
  check_argument(unit_ != nullptr, what + ": the module is null");
  check_argument(options_.op == ReduceOp::kAverage || options_.op == ReduceOp::kSum,
                 what + ": op must be Average or Sum, got " + reduce_op_name(options_.op));
  check_argument(options_.compression == Compression::kNone || options_.compression == Compression::kFp16 ||
                     options_.compression == Compression::kBf16,
                 what + ": compression must be kNone, kFp16 or kBf16");
  check_argument(options_.max_inflight_bytes >= 0,
                 what + ": max_inflight_bytes must be >= 0, got " + std::to_string(options_.max_inflight_bytes));
  const ProcessSet& ps = options_.process_set;
  check_argument(ps.included(), what + ": rank " + std::to_string(rank()) + " is not in process set " +
                                    std::to_string(ps.id()) + "; make the unit on the set's ranks only");
  n_ = ps.size();
  r_ = ps.rank();
  set_ranks_ = ps.ranks();
  {
    std::lock_guard<std::mutex> lock(instances_mu);
    prefix_ = what + "." + std::to_string(ps.id()) + "." + std::to_string(instances[ps.id()]++);
  }
  {
    std::lock_guard<std::recursive_mutex> lock(mu);
    std::shared_ptr<void> c = contexts[ps.id()].lock();
    if (!c) {
      c = std::make_shared<Context>();
      contexts[ps.id()] = c;
    }
    ctx_ = std::static_pointer_cast<Context>(c);
  }
  std::vector<std::pair<std::string, at::Tensor>> found;
  {
    std::lock_guard<std::mutex> lock(managed_mu);
    std::set<const void*> seen;
    for (const auto& item : unit_->named_parameters(/*recurse=*/true)) {
      const at::Tensor& p = item.value();
      if (!p.defined() || p.numel() == 0 || managed.count(p.unsafeGetTensorImpl()) ||
          !seen.insert(p.unsafeGetTensorImpl()).second) {
        continue;
      }
      found.emplace_back(item.key(), p);
    }
  }
  check_layout(found);

  at::NoGradGuard no_grad;
  for (size_t i = 0; i < found.size(); ++i) {
    const at::Tensor& p = found[i].second;
    check_argument(p.is_leaf(), what + ": parameter '" + found[i].first + "' is not a leaf tensor");
    Param q;
    q.fqn = found[i].first;
    q.param = p;
    q.shape = p.sizes().vec();
    q.numel = p.numel();
    q.chunk = (q.numel + n_ - 1) / n_;
    q.start = std::min(r_ * q.chunk, q.numel);
    q.stop = std::min(q.start + q.chunk, q.numel);
    q.shard = p.detach().reshape({-1}).narrow(0, q.start, q.stop - q.start).clone();
    q.shard.set_requires_grad(p.requires_grad());
    q.buf = at::empty({q.chunk * n_}, p.options().requires_grad(false));
    storage_free(q.buf);
    q.name = prefix_ + "." + std::to_string(i);
    if (p.requires_grad()) {
      // Made while the parameter has its full shape: its input metadata is what
      // backward's gradients are checked against.
      q.grad_accumulator = ::torch::autograd::impl::grad_accumulator(p);
      q.hook_key = q.grad_accumulator->add_post_hook(std::make_unique<GradHook>(this, i));
    }
    q.param.set_data(at::empty({0}, p.options().requires_grad(false)));
    params_.push_back(std::move(q));
  }
  std::lock_guard<std::mutex> lock(managed_mu);
  for (const Param& p : params_) managed.insert(p.param.unsafeGetTensorImpl());
}

FullyShardedModule::~FullyShardedModule() {
  std::lock_guard<std::recursive_mutex> lock(mu);
  for (auto* v : {&ctx_->order, &ctx_->backward_queue}) {
    auto it = std::find(v->begin(), v->end(), this);
    if (it == v->end()) continue;
    if (v == &ctx_->backward_queue && static_cast<size_t>(it - v->begin()) < ctx_->issued) --ctx_->issued;
    v->erase(it);
  }
  for (Param& p : params_) {
    if (p.grad_accumulator) p.grad_accumulator->del_post_hook(p.hook_key);
    if (p.gathering.valid()) static_cast<void>(p.gathering.core_handle()->wait());
  }
  // Their results were the abandoned step's to report; a destructor has nobody to tell.
  for (Pending& p : inflight_) static_cast<void>(p.handle.core_handle()->wait());
  std::lock_guard<std::mutex> managed_lock(managed_mu);
  for (const Param& p : params_) managed.erase(p.param.unsafeGetTensorImpl());
}

// Gathers every rank's parameter signatures (one line each: "<signature>\t<name>")
// and raises the same error on every rank if they differ.
void FullyShardedModule::check_layout(const std::vector<std::pair<std::string, at::Tensor>>& params) {
  std::string mine;
  for (const auto& item : params) {
    const at::Tensor& p = item.second;
    std::string sig = "shape " + shape_text(p.sizes()) + " " + c10::toString(p.scalar_type());
    if (p.is_sparse()) {
      sig += " sparse";
    } else if (!p.is_contiguous()) {
      sig += " non-contiguous";
    }
    if (!p.requires_grad()) sig += " (requires_grad false)";
    std::string name = item.first;
    std::replace(name.begin(), name.end(), '\n', ' ');
    std::replace(name.begin(), name.end(), '\t', ' ');
    mine += sig + "\t" + name + "\n";
  }
  const shard_layout::Signatures sigs = shard_layout::gather(kWhat, mine, prefix_, options_.process_set, set_ranks_);
  const std::string what = kWhat;
  auto param_text = [&](size_t i) { return shard_layout::param_text(sigs, i); };
  for (size_t i = 0; i < sigs[0].size(); ++i) {
    const std::string& s = sigs[0][i].first;
    const std::string on = " (on " + ranks_text(set_ranks_) + ")";
    if (s.find(" sparse") != std::string::npos) {
      throw HorovodError(StatusCode::kInvalidArgument,
                         what + ": " + param_text(i) + " is sparse" + on + "; sharded parameters must be dense");
    }
    if (s.find(" non-contiguous") != std::string::npos) {
      throw HorovodError(StatusCode::kInvalidArgument, what + ": " + param_text(i) + " is not contiguous" + on +
                                                           "; make it contiguous (p.set_data(p.contiguous())) first");
    }
    if (!at::isFloatingType(params[i].second.scalar_type())) {
      throw HorovodError(StatusCode::kInvalidArgument, what + ": " + param_text(i) + " is " +
                                                           c10::toString(params[i].second.scalar_type()) + on +
                                                           "; sharded parameters must be floating point");
    }
  }
}

std::vector<at::Tensor> FullyShardedModule::shards() const {
  std::vector<at::Tensor> out;
  for (const Param& p : params_) out.push_back(p.shard);
  return out;
}

::torch::OrderedDict<std::string, at::Tensor> FullyShardedModule::named_shards() const {
  ::torch::OrderedDict<std::string, at::Tensor> out;
  for (const Param& p : params_) out.insert(p.fqn, p.shard);
  return out;
}

void FullyShardedModule::check_forward() const {
  if (forward_.is_empty()) {
    throw HorovodError(StatusCode::kPrecondition,
                       std::string(kWhat) +
                           ": this unit has no forward of its own (its module's forward is a template, or the unit "
                           "was given as a torch::nn::Module); use run([&] { return unit->forward(...); }), or "
                           "unshard() / after_forward(outputs)");
  }
}

// --------------------------------------------------------------- gathers ----

// Gathers the given parameters (all their allgathers first, then the waits)
// into their buffers and points the parameters at them.
void FullyShardedModule::gather(const std::vector<size_t>& which) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  at::NoGradGuard no_grad;
  for (size_t i : which) {
    Param& p = params_[i];
    if (!p.full && !p.gathering.valid()) {
      p.gathering = allgather_async(p.padded_shard(), p.name + ".ag", options_.process_set);
    }
  }
  std::unique_ptr<HorovodError> first;
  for (size_t i : which) {
    Param& p = params_[i];
    if (!p.gathering.valid()) continue;
    AsyncHandle h = std::move(p.gathering);
    p.gathering = AsyncHandle();
    try {
      at::Tensor out = h.synchronize();
      storage_alloc(p.buf);
      // variable_data(): the same storage under another version counter, so
      // the copy does not invalidate the views of buf that autograd saved.
      p.buf.variable_data().copy_(out.reshape({-1}));
      p.param.set_data(p.buf.narrow(0, 0, p.numel).view(p.shape));
      p.full = true;
    } catch (const HorovodError& e) {
      if (!first) first = std::make_unique<HorovodError>(e);
    }
  }
  if (first) throw *first;
}

// The parameters backward needs: those that require grad.
void FullyShardedModule::start_gather() {
  at::NoGradGuard no_grad;
  for (Param& p : params_) {
    if (p.param.requires_grad() && !p.full && !p.gathering.valid()) {
      p.gathering = allgather_async(p.padded_shard(), p.name + ".ag", options_.process_set);
    }
  }
}

void FullyShardedModule::finish_gathers() {
  std::vector<size_t> which;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].gathering.valid()) which.push_back(i);
  }
  gather(which);
}

// Ends the backward pass (at the next forward, or synchronize()): issues the
// gathers that other ranks' backward issued and this one's did not reach, waits
// for them and frees them.
void FullyShardedModule::end_pass(Context& ctx) {
  if (!ctx.pass_active) return;
  ctx.pass_active = false;
  std::unique_ptr<HorovodError> first;
  for (; ctx.issued < ctx.backward_queue.size(); ++ctx.issued) ctx.backward_queue[ctx.issued]->start_gather();
  for (FullyShardedModule* u : ctx.backward_queue) {
    try {
      u->finish_gathers();
    } catch (const HorovodError& e) {
      if (!first) first = std::make_unique<HorovodError>(e);
    }
    u->reshard();
  }
  ctx.backward_queue.clear();
  ctx.issued = 0;
  for (FullyShardedModule* u : ctx.order) u->forward_with_grad_ = false;
  if (first) throw *first;
}

void FullyShardedModule::unshard() {
  std::vector<size_t> all(params_.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  gather(all);
}

void FullyShardedModule::free_param(Param& p) {
  if (!p.full) return;
  p.param.set_data(at::empty({0}, p.buf.options()));
  storage_free(p.buf);
  p.full = false;
}

void FullyShardedModule::reshard() {
  std::lock_guard<std::recursive_mutex> lock(mu);
  for (Param& p : params_) free_param(p);
}

void FullyShardedModule::after_forward(const std::vector<at::Tensor>& outputs) {
  if (!at::GradMode::is_enabled()) {
    reshard();
    return;
  }
  {
    std::lock_guard<std::recursive_mutex> lock(mu);
    // A forward after a backward: that pass is over.
    end_pass(*ctx_);
    if (std::find(ctx_->order.begin(), ctx_->order.end(), this) == ctx_->order.end()) ctx_->order.push_back(this);
    forward_with_grad_ = true;
  }
  auto fired = std::make_shared<bool>(false);
  std::weak_ptr<FullyShardedModule> self = weak_from_this();
  for (const at::Tensor& t : outputs) {
    if (!t.defined() || !t.requires_grad()) continue;
    t.register_hook([self, fired](const at::Tensor&) {
      if (*fired) return;
      *fired = true;
      if (auto s = self.lock()) s->pre_backward();
    });
  }
  if (options_.reshard_after_forward) reshard();
}

// Gathers the parameters for this unit's backward. Which units' backward runs,
// and in which order, may differ across ranks; the gathers are therefore issued
// in one order on every rank, the reverse of the forward's: every gather up to
// this unit's, then the wait for its own only. A rank thus waits only on gathers
// every other rank has issued or will issue before waiting itself.
void FullyShardedModule::pre_backward() {
  std::lock_guard<std::recursive_mutex> lock(mu);
  Context& ctx = *ctx_;
  if (!ctx.pass_active) {
    ctx.pass_active = true;
    ctx.backward_queue.clear();
    for (auto it = ctx.order.rbegin(); it != ctx.order.rend(); ++it) {
      if ((*it)->forward_with_grad_ && (*it)->options_.reshard_after_forward) ctx.backward_queue.push_back(*it);
    }
    ctx.issued = 0;
  }
  auto at = std::find(ctx.backward_queue.begin(), ctx.backward_queue.end(), this);
  if (at == ctx.backward_queue.end()) return;  // kept gathered since forward
  const size_t last = static_cast<size_t>(at - ctx.backward_queue.begin());
  for (; ctx.issued <= last; ++ctx.issued) ctx.backward_queue[ctx.issued]->start_gather();
  finish_gathers();
}

// ------------------------------------------------------- gradient reduce ----

void FullyShardedModule::on_gradient_ready(size_t i) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  Param& p = params_[i];
  at::Tensor grad = p.param.grad();
  p.param.mutable_grad() = at::Tensor();
  if (grad.defined()) send(p, grad);
  free_param(p);
  bound_inflight();
}

// Starts the reducescatter of a full gradient, padded to chunk * n elements.
void FullyShardedModule::send(Param& p, const at::Tensor& grad) {
  at::NoGradGuard no_grad;
  if (grad.is_sparse()) {
    throw HorovodError(StatusCode::kInvalidArgument, std::string(kWhat) + ": the gradient of '" + p.fqn +
                                                         "' is sparse on rank " + std::to_string(rank()) +
                                                         "; sharded parameters take dense gradients");
  }
  at::Tensor flat = grad.detach().reshape({-1});
  const int64_t total = p.chunk * n_;
  if (total > p.numel) flat = at::cat({flat, at::zeros({total - p.numel}, flat.options())});
  const at::ScalarType wire = shard_layout::compression_wire_type(options_.compression, flat.scalar_type());
  if (wire != flat.scalar_type()) flat = flat.to(wire);
  ReducescatterOptions ro;
  ro.op = options_.op;
  ro.process_set = options_.process_set;
  AsyncHandle handle = reducescatter_async(flat, p.name + ".rs" + std::to_string(p.sends++), ro);
  const int64_t bytes = flat.numel() * static_cast<int64_t>(flat.element_size());
  inflight_.push_back({static_cast<size_t>(&p - params_.data()), std::move(handle), bytes});
  inflight_bytes_ += bytes;
}

// Adds a finished reduction (this rank's chunk) to the shard's gradient.
void FullyShardedModule::finish(Pending& pending) {
  Param& p = params_[pending.param];
  at::Tensor out = pending.handle.synchronize();
  if (out.numel() != p.chunk) {
    throw HorovodError(StatusCode::kInternal, std::string(kWhat) + ": the reducescatter of '" + p.fqn + "' returned " +
                                                  std::to_string(out.numel()) + " elements, not " +
                                                  std::to_string(p.chunk));
  }
  at::NoGradGuard no_grad;
  out = out.reshape({-1}).narrow(0, 0, p.stop - p.start).to(p.shard.scalar_type()).clone();
  at::Tensor& g = p.shard.mutable_grad();
  if (!g.defined()) {
    g = out;
  } else {
    g.add_(out);
  }
}

// Beyond max_inflight_bytes, finishes the oldest reductions; each wait gives
// way after kBoundWait, since the other ranks may send in another order.
void FullyShardedModule::bound_inflight() {
  while (inflight_bytes_ > options_.max_inflight_bytes && inflight_.size() > 1) {
    if (!inflight_.front().handle.wait_for(kBoundWait)) break;
    Pending p = std::move(inflight_.front());
    inflight_.erase(inflight_.begin());
    inflight_bytes_ -= p.bytes;
    finish(p);
  }
}

void FullyShardedModule::synchronize() {
  std::lock_guard<std::recursive_mutex> lock(mu);
  std::unique_ptr<HorovodError> first;
  auto attempt = [&](auto fn) {
    try {
      fn();
    } catch (const HorovodError& e) {
      if (!first) first = std::make_unique<HorovodError>(e);
    }
  };
  // Gathered for a backward that did not reach them on this rank.
  attempt([&] { end_pass(*ctx_); });
  reshard();
  // Every rank sends as many reductions per parameter as the rank that sent most.
  std::vector<int64_t> counts;
  for (const Param& p : params_) counts.push_back(p.sends);
  if (!counts.empty()) {
    AllreduceOptions ao;
    ao.op = ReduceOp::kMax;
    ao.process_set = options_.process_set;
    at::Tensor most = allreduce(at::tensor(counts, at::kLong), prefix_ + ".sends", ao);
    for (size_t i = 0; i < params_.size(); ++i) {
      Param& p = params_[i];
      const int64_t target = most[static_cast<int64_t>(i)].item<int64_t>();
      while (p.sends < target) {
        attempt([&] { send(p, at::zeros({p.numel}, p.shard.options().requires_grad(false))); });
      }
    }
  }
  while (!inflight_.empty()) {
    Pending p = std::move(inflight_.front());
    inflight_.erase(inflight_.begin());
    inflight_bytes_ -= p.bytes;
    attempt([&] { finish(p); });
  }
  for (Param& p : params_) p.sends = 0;
  if (first) throw *first;
}

void FullyShardedModule::step(::torch::optim::Optimizer& optimizer) {
  synchronize();
  optimizer.step();
}

void FullyShardedModule::zero_grad(bool set_to_none) {
  for (Param& p : params_) {
    at::Tensor& g = p.shard.mutable_grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      g = at::Tensor();
    } else {
      g.zero_();
    }
  }
}

// ------------------------------------------------------------ checkpoints ----

::torch::OrderedDict<std::string, at::Tensor> FullyShardedModule::gather_full_parameters() {
  std::lock_guard<std::recursive_mutex> lock(mu);
  at::NoGradGuard no_grad;
  std::vector<AsyncHandle> handles;
  for (const Param& p : params_)
    handles.push_back(allgather_async(p.padded_shard(), p.name + ".full", options_.process_set));
  ::torch::OrderedDict<std::string, at::Tensor> out;
  std::unique_ptr<HorovodError> first;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Param& p = params_[i];
    try {
      out.insert(p.fqn, handles[i].synchronize().reshape({-1}).narrow(0, 0, p.numel).view(p.shape).clone());
    } catch (const HorovodError& e) {
      if (!first) first = std::make_unique<HorovodError>(e);
    }
  }
  if (first) throw *first;
  return out;
}

void FullyShardedModule::load_full(const ::torch::OrderedDict<std::string, at::Tensor>& full, bool strict) {
  const std::string what = std::string(kWhat) + "::load_full";
  std::lock_guard<std::recursive_mutex> lock(mu);
  at::NoGradGuard no_grad;
  for (Param& p : params_) {
    const at::Tensor* v = full.find(p.fqn);
    if (v == nullptr) {
      check_argument(!strict, what + ": '" + p.fqn + "' is missing");
      continue;
    }
    check_argument(
        v->sizes() == at::IntArrayRef(p.shape),
        what + ": '" + p.fqn + "' has shape " + shape_text(v->sizes()) + ", the parameter " + shape_text(p.shape));
    p.shard.copy_(v->detach().reshape({-1}).narrow(0, p.start, p.stop - p.start));
    if (p.full) p.buf.variable_data().narrow(0, 0, p.numel).copy_(v->detach().reshape({-1}));
  }
}

}  // namespace torch
}  // namespace horovodlite
