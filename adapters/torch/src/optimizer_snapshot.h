// A copy of an optimizer's state in memory (the elastic state's commit): the
// per-parameter state of the built-in optimizers (SGD, Adam, AdamW, RMSprop,
// Adagrad: copied tensor by tensor into the previous snapshot's buffers; LBFGS:
// cloned), and every param group's options; other (user) optimizers through the
// serialized archive broadcast_optimizer_state sends. Private to the adapter.
#pragma once

#include <torch/optim/optimizer.h>

#include <memory>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace horovodlite {
namespace torch {
namespace detail {

// saved <- live, of the same sizes, dtype and device: memcpy for contiguous CPU
// tensors (glibc's, with streaming stores for large blocks: faster than
// Tensor::copy_ for a large model's state), copy_ otherwise. The commit of an
// elastic state copies with it.
void copy_into(const at::Tensor& saved, const at::Tensor& live);

class OptimizerSnapshot {
 public:
  void save(const ::torch::optim::Optimizer& optimizer);
  // Makes the optimizer's state and options the snapshot's (copies: training
  // afterwards does not change the snapshot).
  void restore(::torch::optim::Optimizer& optimizer) const;

 private:
  // Keyed as the optimizer's own state: void* (the parameter's TensorImpl) in
  // LibTorch 2.x, a string in 1.13 (Debian's).
  using StateKey = std::decay_t<decltype(std::declval<const ::torch::optim::Optimizer&>().state())>::key_type;
  std::unordered_map<StateKey, std::unique_ptr<::torch::optim::OptimizerParamState>> state_;
  std::vector<std::unique_ptr<::torch::optim::OptimizerOptions>> options_;
  std::string blob_;  // the archive, when some state is of a type not copied directly
  bool serialized_ = false;
};

}  // namespace detail
}  // namespace torch
}  // namespace horovodlite
