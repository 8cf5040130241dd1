#pragma once
// The differences between the LibTorch releases horovodlite builds against
// (Debian's 1.13 through PyPI's 2.13), in one place. Everything else in the
// adapter, the Python module and the tests is written once against these names.
//
//  * Autograd nodes are owned by std::shared_ptr in 1.13 and by c10::intrusive_ptr
//    in recent 2.x (and torch::autograd::deleteNode is gone): NodePtr<T> and
//    make_node<T>(...) are whichever the LibTorch found uses. Detected from the
//    type grad_accumulator() returns, not from a version number.
//  * Autocast state per device: is_autocast_enabled(device) / get_autocast_dtype
//    (device) in 2.4+, per-device functions (is_enabled, is_cpu_enabled, ...)
//    before.
//  * The optimizer's per-parameter state is keyed by the parameter's TensorImpl*
//    in 2.x, by that pointer printed as a string in 1.13: optimizer_state_key().
//  * c10 warning handlers: process(const c10::Warning&) and
//    c10::WarningUtils::WarningHandlerGuard in 2.x; process(location, message,
//    verbatim) and c10::Warning::WarningHandlerGuard in 1.13: WarningHandler and
//    WarningHandlerGuard here.
#include <ATen/autocast_mode.h>
#include <c10/util/Exception.h>
#include <torch/csrc/api/include/torch/version.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

// True when the LibTorch being compiled against is at least major.minor.
#define HVL_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace horovodlite {
namespace torch {
namespace compat {

namespace ag = ::torch::autograd;

// The owning pointer LibTorch uses for autograd nodes (edges, grad accumulators).
using NodeHandle = decltype(ag::impl::grad_accumulator(std::declval<const at::Tensor&>()));
constexpr bool kIntrusiveNodes = !std::is_same<NodeHandle, std::shared_ptr<ag::Node>>::value;

template <class T>
using NodePtr = std::conditional_t<kIntrusiveNodes, c10::intrusive_ptr<T>, std::shared_ptr<T>>;

// A new autograd node of type T, owned the way this LibTorch owns nodes (in 1.13
// with deleteNode, which frees long chains of nodes without deep recursion).
template <class T, class... Args>
NodePtr<T> make_node(Args&&... args) {
  if constexpr (kIntrusiveNodes) {
    return c10::make_intrusive<T>(std::forward<Args>(args)...);
  } else {
    // Unqualified, so that it is looked up (by ADL, in torch::autograd) only when
    // this branch is instantiated: recent LibTorch has no deleteNode.
    return std::shared_ptr<T>(new T(std::forward<Args>(args)...), [](T* node) { deleteNode(node); });
  }
}

// ---- autocast state of one device type (at::kCPU or at::kCUDA) ----

inline bool autocast_enabled(at::DeviceType device) {
#if HVL_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(device);
#else
  return device == at::kCPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
#endif
}

inline void set_autocast_enabled(at::DeviceType device, bool enabled) {
#if HVL_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(device, enabled);
#else
  if (device == at::kCPU) {
    at::autocast::set_cpu_enabled(enabled);
  } else {
    at::autocast::set_enabled(enabled);
  }
#endif
}

inline at::ScalarType autocast_dtype(at::DeviceType device) {
#if HVL_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(device);
#else
  return device == at::kCPU ? at::autocast::get_autocast_cpu_dtype() : at::autocast::get_autocast_gpu_dtype();
#endif
}

inline void set_autocast_dtype(at::DeviceType device, at::ScalarType dtype) {
#if HVL_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == at::kCPU) {
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
#endif
}

// ---- optimizer state ----

// The key of parameter p in torch::optim::Optimizer::state().
template <class Optimizer = ::torch::optim::Optimizer>
auto optimizer_state_key(const at::Tensor& p) {
  using Key = typename std::decay_t<decltype(std::declval<Optimizer&>().state())>::key_type;
  if constexpr (std::is_same<Key, std::string>::value) {
    std::ostringstream key;  // what 1.13's c10::guts::to_string(TensorImpl*) wrote
    key << p.unsafeGetTensorImpl();
    return Key(key.str());
  } else {
    return Key(p.unsafeGetTensorImpl());
  }
}

// ---- warnings (TORCH_WARN) ----

// A c10 warning handler that gets each warning's message.
class WarningHandler : public c10::WarningHandler {
 public:
  virtual void on_warning(const std::string& message) = 0;
#if HVL_TORCH_AT_LEAST(2, 0)
  void process(const c10::Warning& warning) override { on_warning(warning.msg()); }
#else
  void process(const c10::SourceLocation&, const std::string& message, const bool) override { on_warning(message); }
#endif
};

#if HVL_TORCH_AT_LEAST(2, 0)
using WarningHandlerGuard = c10::WarningUtils::WarningHandlerGuard;
#else
using WarningHandlerGuard = c10::Warning::WarningHandlerGuard;
#endif

}  // namespace compat
}  // namespace torch
}  // namespace horovodlite
