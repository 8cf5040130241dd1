#include "optimizer_snapshot.h"

#include <ATen/core/grad_mode.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/lbfgs.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <cstring>

#include "optimizer_blob.h"

namespace horovodlite {
namespace torch {
namespace detail {

void copy_into(const at::Tensor& saved, const at::Tensor& live) {
  if (saved.device().is_cpu() && live.device().is_cpu() && saved.is_contiguous() && live.is_contiguous() &&
      saved.dtype() == live.dtype() && saved.numel() == live.numel() && !live.is_conj() && !live.is_neg()) {
    std::memcpy(saved.data_ptr(), live.data_ptr(), live.nbytes());
    return;
  }
  saved.copy_(live);
}

namespace {

using ::torch::optim::OptimizerParamState;

// `live` copied into `previous` where the layout matches (no allocation), a
// fresh clone elsewhere; undefined stays undefined.
at::Tensor refresh(const at::Tensor& previous, const at::Tensor& live) {
  if (!live.defined()) return live;
  if (previous.defined() && previous.sizes() == live.sizes() && previous.strides() == live.strides() &&
      previous.dtype() == live.dtype() && previous.device() == live.device() && live.layout() == at::kStrided) {
    copy_into(previous, live);
    return previous;
  }
  return live.detach().clone();
}

// A deep copy of `live` if it is an S, reusing `previous`'s tensors; null otherwise.
// `tensors(state)` returns references to S's tensor fields.
template <typename S, typename Tensors>
std::unique_ptr<OptimizerParamState> copy_as(const OptimizerParamState& live, OptimizerParamState* previous,
                                             Tensors tensors) {
  const auto* from = dynamic_cast<const S*>(&live);
  if (from == nullptr) return nullptr;
  auto* old = dynamic_cast<S*>(previous);
  auto out = std::make_unique<S>(*from);  // the plain fields; tensors still shared with live
  auto out_fields = tensors(*out);
  if (old != nullptr) {
    auto old_fields = tensors(*old);
    for (size_t i = 0; i < out_fields.size(); ++i) *out_fields[i] = refresh(*old_fields[i], *out_fields[i]);
  } else {
    for (at::Tensor* t : out_fields) *t = refresh(at::Tensor(), *t);
  }
  return out;
}

// LBFGS keeps its history in deques (of varying length): always fresh clones.
std::unique_ptr<OptimizerParamState> copy_lbfgs(const OptimizerParamState& live) {
  const auto* from = dynamic_cast<const ::torch::optim::LBFGSParamState*>(&live);
  if (from == nullptr) return nullptr;
  auto out = std::make_unique<::torch::optim::LBFGSParamState>(*from);
  auto deep = [](at::Tensor& t) { t = refresh(at::Tensor(), t); };
  deep(out->d());
  deep(out->H_diag());
  deep(out->prev_flat_grad());
  for (at::Tensor& t : out->old_dirs()) deep(t);
  for (at::Tensor& t : out->old_stps()) deep(t);
  for (at::Tensor& t : out->ro()) deep(t);
  if (out->al().has_value()) {
    for (at::Tensor& t : *out->al()) deep(t);
  }
  return out;
}

std::unique_ptr<OptimizerParamState> copy_state(const OptimizerParamState& live, OptimizerParamState* previous) {
  namespace optim = ::torch::optim;
  using Fields = std::vector<at::Tensor*>;
  if (auto s = copy_lbfgs(live)) return s;
  if (auto s = copy_as<optim::SGDParamState>(live, previous,
                                             [](optim::SGDParamState& x) { return Fields{&x.momentum_buffer()}; })) {
    return s;
  }
  if (auto s = copy_as<optim::AdamParamState>(live, previous, [](optim::AdamParamState& x) {
        return Fields{&x.exp_avg(), &x.exp_avg_sq(), &x.max_exp_avg_sq()};
      })) {
    return s;
  }
  if (auto s = copy_as<optim::AdamWParamState>(live, previous, [](optim::AdamWParamState& x) {
        return Fields{&x.exp_avg(), &x.exp_avg_sq(), &x.max_exp_avg_sq()};
      })) {
    return s;
  }
  if (auto s = copy_as<optim::RMSpropParamState>(live, previous, [](optim::RMSpropParamState& x) {
        return Fields{&x.square_avg(), &x.momentum_buffer(), &x.grad_avg()};
      })) {
    return s;
  }
  return copy_as<optim::AdagradParamState>(live, previous,
                                           [](optim::AdagradParamState& x) { return Fields{&x.sum()}; });
}

}  // namespace

void OptimizerSnapshot::save(const ::torch::optim::Optimizer& optimizer) {
  at::NoGradGuard no_grad;
  decltype(state_) state;
  bool direct = true;
  for (const auto& item : optimizer.state()) {
    auto old = state_.find(item.first);
    std::unique_ptr<OptimizerParamState> copy =
        copy_state(*item.second, old != state_.end() ? old->second.get() : nullptr);
    if (!copy) {
      direct = false;
      break;
    }
    state.emplace(item.first, std::move(copy));
  }
  if (!direct) {
    state_.clear();
    options_.clear();
    blob_ = serialize_optimizer(optimizer);
    serialized_ = true;
    return;
  }
  state_ = std::move(state);
  options_.clear();
  for (const auto& group : optimizer.param_groups()) options_.push_back(group.options().clone());
  blob_.clear();
  serialized_ = false;
}

void OptimizerSnapshot::restore(::torch::optim::Optimizer& optimizer) const {
  if (serialized_) {
    deserialize_optimizer(blob_, optimizer);
    return;
  }
  at::NoGradGuard no_grad;
  auto& live = optimizer.state();
  live.clear();
  for (const auto& item : state_) live[item.first] = copy_state(*item.second, nullptr);
  auto& groups = optimizer.param_groups();
  for (size_t i = 0; i < groups.size() && i < options_.size(); ++i) groups[i].set_options(options_[i]->clone());
}

}  // namespace detail
}  // namespace torch
}  // namespace horovodlite
