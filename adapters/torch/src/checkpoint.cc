// Activation checkpointing: see checkpoint.h for the design.
#include "horovodlite/torch/checkpoint.h"

#include <ATen/SequenceNumber.h>
#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include "horovodlite/torch/compat.h"

namespace horovodlite {
namespace torch {
namespace {

namespace ag = ::torch::autograd;

// ---- RNG state: saved before the first run, restored for the recomputation ----

struct GeneratorState {
  at::Device device;
  at::Tensor state;
};

at::Generator default_generator(const at::Device& device) { return at::globalContext().defaultGenerator(device); }

at::Tensor get_generator_state(const at::Device& device) {
  at::Generator gen = default_generator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_generator_state(const at::Device& device, const at::Tensor& state) {
  at::Generator gen = default_generator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// The generators a run of fn may draw from: the CPU one always, and the CUDA one
// of each CUDA device an input lives on (what torch.utils.checkpoint saves).
std::vector<at::Device> rng_devices(const std::vector<at::Tensor>& inputs) {
  std::vector<at::Device> devices{at::Device(at::kCPU)};
  if (!at::hasCUDA()) {
    return devices;
  }
  for (const at::Tensor& t : inputs) {
    if (t.defined() && t.is_cuda() && std::find(devices.begin(), devices.end(), t.device()) == devices.end()) {
      devices.push_back(t.device());
    }
  }
  return devices;
}

std::vector<GeneratorState> capture_rng(const std::vector<at::Device>& devices) {
  std::vector<GeneratorState> states;
  states.reserve(devices.size());
  for (const at::Device& d : devices) {
    states.push_back({d, get_generator_state(d)});
  }
  return states;
}

// Sets the saved states for its lifetime, then puts back the states it found, so
// the recomputation replays the first run's random numbers and the caller's
// stream continues as if the recomputation had not happened.
class RngReplayGuard {
 public:
  explicit RngReplayGuard(const std::vector<GeneratorState>& saved) {
    std::vector<at::Device> devices;
    for (const GeneratorState& s : saved) {
      devices.push_back(s.device);
    }
    current_ = capture_rng(devices);
    for (const GeneratorState& s : saved) {
      set_generator_state(s.device, s.state);
    }
  }
  ~RngReplayGuard() {
    for (const GeneratorState& s : current_) {
      set_generator_state(s.device, s.state);
    }
  }
  RngReplayGuard(const RngReplayGuard&) = delete;
  RngReplayGuard& operator=(const RngReplayGuard&) = delete;

 private:
  std::vector<GeneratorState> current_;
};

// ---- autocast state: backward runs under the state of the backward() call ----

struct AutocastState {
  bool gpu_enabled = false;
  bool cpu_enabled = false;
  at::ScalarType gpu_dtype = at::kHalf;
  at::ScalarType cpu_dtype = at::kBFloat16;

  static AutocastState capture() {
    return {compat::autocast_enabled(at::kCUDA), compat::autocast_enabled(at::kCPU), compat::autocast_dtype(at::kCUDA),
            compat::autocast_dtype(at::kCPU)};
  }
  void apply() const {
    compat::set_autocast_enabled(at::kCUDA, gpu_enabled);
    compat::set_autocast_enabled(at::kCPU, cpu_enabled);
    compat::set_autocast_dtype(at::kCUDA, gpu_dtype);
    compat::set_autocast_dtype(at::kCPU, cpu_dtype);
  }
};

class AutocastGuard {
 public:
  explicit AutocastGuard(const AutocastState& state) : previous_(AutocastState::capture()) { state.apply(); }
  ~AutocastGuard() { previous_.apply(); }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  AutocastState previous_;
};

// ---- finding the tensors fn read besides its inputs ----

// Walks fn's graph from its outputs. Nodes created while fn ran (on this thread,
// sequence number >= first_sequence_nr) are inside it and are walked through.
// Every edge leaving the inside is recorded, except edges to the grad accumulators
// of fn's own (detached) inputs: leaves that require grad (parameters) and nodes
// made before fn ran (tensors computed outside fn and captured by it).
class ExternalEdgeFinder {
 public:
  ExternalEdgeFinder(const std::unordered_set<const at::TensorImpl*>& inputs, uint64_t first_sequence_nr,
                     uint64_t thread_id)
      : inputs_(inputs), first_sequence_nr_(first_sequence_nr), thread_id_(thread_id) {}

  ag::edge_list find(const std::vector<at::Tensor>& outputs) {
    for (const at::Tensor& out : outputs) {
      if (out.defined() && out.requires_grad()) {
        visit(ag::impl::gradient_edge(out));
      }
    }
    while (!pending_.empty()) {
      ag::Node* node = pending_.back();
      pending_.pop_back();
      for (const ag::Edge& edge : node->next_edges()) {
        visit(edge);
      }
    }
    return std::move(found_);
  }

 private:
  void visit(const ag::Edge& edge) {
    if (!edge.is_valid()) {
      return;
    }
    ag::Node* node = edge.function.get();
    if (auto* acc = dynamic_cast<ag::AccumulateGrad*>(node)) {
      if (inputs_.count(acc->variable.unsafeGetTensorImpl()) == 0) {
        record(edge);
      }
      return;
    }
    const bool inside = node->thread_id() == thread_id_ && node->sequence_nr() >= first_sequence_nr_;
    if (!inside) {
      record(edge);
    } else if (visited_.insert(node).second) {
      pending_.push_back(node);
    }
  }

  void record(const ag::Edge& edge) {
    if (recorded_.insert({edge.function.get(), edge.input_nr}).second) {
      found_.push_back(edge);
    }
  }

  const std::unordered_set<const at::TensorImpl*>& inputs_;
  const uint64_t first_sequence_nr_;
  const uint64_t thread_id_;
  std::unordered_set<const ag::Node*> visited_;
  std::vector<ag::Node*> pending_;
  std::set<std::pair<const ag::Node*, uint32_t>> recorded_;
  ag::edge_list found_;
};

// ---- the node in the autograd graph ----

struct SavedInput {
  at::Tensor tensor;  // undefined for an undefined input; on CPU when offloaded
  at::Device device = at::kCPU;
  bool requires_grad = false;
  int64_t version = 0;
};

// next_edges: one per input (invalid where the input needs no grad), then the
// external edges. Inputs of the node: one per differentiable output of fn.
class CheckpointNode : public ag::Node {
 public:
  CheckpointNode(CheckpointFunction fn, std::vector<SavedInput> inputs, std::vector<GeneratorState> rng,
                 AutocastState autocast)
      : fn_(std::move(fn)), inputs_(std::move(inputs)), rng_(std::move(rng)), autocast_(autocast) {}

  std::string name() const override { return "horovodlite::torch::CheckpointBackward"; }

  // Called once per output of the first run, in order.
  void add_output(bool differentiable) { output_slot_.push_back(differentiable ? next_slot_++ : -1); }

  ag::variable_list apply(ag::variable_list&& grads) override {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(fn_,
                "checkpoint: trying to backward through a checkpoint a second time, or after "
                "its saved inputs were freed; pass retain_graph=true to the first backward");
    TORCH_CHECK(!at::GradMode::is_enabled(),
                "checkpoint: higher-order gradients (backward with create_graph=true) are not "
                "supported through a checkpoint");
    std::vector<at::Tensor> detached = restore_inputs();

    std::vector<at::Tensor> outputs;
    {
      std::unique_ptr<RngReplayGuard> rng_guard;
      if (!rng_.empty()) {
        rng_guard = std::make_unique<RngReplayGuard>(rng_);
      }
      AutocastGuard autocast_guard(autocast_);
      at::AutoGradMode enable_grad(true);
      outputs = fn_(detached);
    }
    TORCH_CHECK(outputs.size() == output_slot_.size(), "checkpoint: fn returned ", outputs.size(),
                " tensors when recomputed in backward but ", output_slot_.size(), " in forward");

    ag::edge_list roots;
    ag::variable_list root_grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      const int64_t slot = output_slot_[i];
      if (slot < 0 || !grads.at(slot).defined()) {
        continue;
      }
      TORCH_CHECK(outputs[i].defined() && outputs[i].requires_grad(), "checkpoint: output ", i,
                  " of fn required grad in forward but not when recomputed in backward");
      roots.push_back(ag::impl::gradient_edge(outputs[i]));
      root_grads.push_back(std::move(grads[slot]));
    }

    // Gradients are wanted for the recomputation's own inputs and for the
    // external edges, which the recomputed graph reaches as the first run's did.
    ag::edge_list wanted;
    std::vector<size_t> wanted_slot;  // index into next_edges()
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (inputs_[i].requires_grad) {
        wanted.push_back(ag::impl::gradient_edge(detached[i]));
        wanted_slot.push_back(i);
      }
    }
    for (size_t e = inputs_.size(); e < num_outputs(); ++e) {
      wanted.push_back(next_edge(e));
      wanted_slot.push_back(e);
    }

    ag::variable_list result(num_outputs());
    if (roots.empty() || wanted.empty()) {
      return result;
    }
    ag::variable_list computed =
        ag::Engine::get_default_engine().execute(roots, root_grads, /*keep_graph=*/false, /*create_graph=*/false,
                                                 /*accumulate_grad=*/false, wanted);
    for (size_t k = 0; k < computed.size(); ++k) {
      result[wanted_slot[k]] = std::move(computed[k]);
    }
    return result;
  }

  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    fn_ = nullptr;
    inputs_.clear();
    rng_.clear();
  }

 private:
  std::vector<at::Tensor> restore_inputs() const {
    std::vector<at::Tensor> detached(inputs_.size());
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const SavedInput& in = inputs_[i];
      if (!in.tensor.defined()) {
        continue;
      }
      TORCH_CHECK(in.tensor._version() == in.version, "checkpoint: input ", i,
                  " was modified by an in-place operation, inside fn or after checkpoint() returned "
                  "(its version is ",
                  in.tensor._version(), ", expected ", in.version,
                  "); the recomputation would not see the value the first run saw");
      at::Tensor t = in.tensor.device() == in.device ? in.tensor : in.tensor.to(in.device);
      detached[i] = t.detach();
      detached[i].requires_grad_(in.requires_grad);
    }
    return detached;
  }

  CheckpointFunction fn_;
  std::vector<SavedInput> inputs_;
  std::vector<GeneratorState> rng_;
  AutocastState autocast_;
  std::vector<int64_t> output_slot_;  // output of fn -> input slot of this node, or -1
  int64_t next_slot_ = 0;
};

SavedInput save_input(const at::Tensor& input, bool offload_to_cpu) {
  SavedInput saved;
  if (!input.defined()) {
    return saved;
  }
  saved.device = input.device();
  saved.requires_grad = input.requires_grad();
  saved.tensor = input.detach();
  if (offload_to_cpu && !input.is_cpu()) {
    saved.tensor = saved.tensor.to(at::kCPU);
  }
  saved.version = saved.tensor._version();
  return saved;
}

}  // namespace

std::vector<at::Tensor> checkpoint(const CheckpointFunction& fn, std::vector<at::Tensor> inputs,
                                   const CheckpointOptions& options) {
  TORCH_CHECK(static_cast<bool>(fn), "checkpoint: fn is empty");
  if (!at::GradMode::is_enabled()) {
    return fn(inputs);  // no graph is being recorded: nothing to save
  }

  std::vector<SavedInput> saved;
  std::vector<at::Tensor> detached(inputs.size());
  std::unordered_set<const at::TensorImpl*> detached_impls;
  saved.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    saved.push_back(save_input(inputs[i], options.offload_to_cpu));
    if (inputs[i].defined()) {
      detached[i] = inputs[i].detach();
      detached[i].requires_grad_(inputs[i].requires_grad());
      detached_impls.insert(detached[i].unsafeGetTensorImpl());
    }
  }
  std::vector<GeneratorState> rng;
  if (options.preserve_rng_state) {
    rng = capture_rng(rng_devices(inputs));
  }
  const AutocastState autocast = AutocastState::capture();

  // The first run records fn's graph only to find the tensors it read; the graph
  // and the activations it holds are dropped when `raw` goes out of scope.
  const uint64_t first_sequence_nr = at::sequence_number::peek();
  std::vector<at::Tensor> raw = fn(detached);
  ag::edge_list external =
      ExternalEdgeFinder(detached_impls, first_sequence_nr, at::RecordFunction::currentThreadId()).find(raw);

  const bool any_input_requires_grad = ag::any_variable_requires_grad(inputs);
  if (!any_input_requires_grad && external.empty()) {
    TORCH_WARN(
        "checkpoint: none of the inputs require grad and fn reads no tensor that does; "
        "gradients will not flow through this checkpoint");
    return raw;
  }

  auto node = compat::make_node<CheckpointNode>(fn, std::move(saved), std::move(rng), autocast);
  ag::edge_list edges = ag::collect_next_edges(inputs);
  edges.insert(edges.end(), external.begin(), external.end());
  node->set_next_edges(std::move(edges));

  std::vector<at::Tensor> outputs;
  outputs.reserve(raw.size());
  for (at::Tensor& r : raw) {
    const bool differentiable = r.defined() && r.requires_grad();
    node->add_output(differentiable);
    if (differentiable) {
      at::Tensor out = r.detach();
      ag::create_gradient_edge(out, node);
      outputs.push_back(std::move(out));
    } else {
      outputs.push_back(std::move(r));
    }
  }
  return outputs;
}

at::Tensor checkpoint_sequential(::torch::nn::Sequential sequential, int segments, at::Tensor input,
                                 bool preserve_rng_state) {
  if (sequential.is_empty()) {
    throw std::invalid_argument("checkpoint_sequential: the Sequential holder is empty");
  }
  const int64_t n = static_cast<int64_t>(sequential->size());
  if (segments < 1 || segments > n) {
    throw std::invalid_argument(
        "checkpoint_sequential: segments must be between 1 and the "
        "number of modules (" +
        std::to_string(n) + "), got " + std::to_string(segments));
  }
  auto run = [sequential](int64_t begin, int64_t end, at::Tensor x) mutable {
    for (int64_t i = begin; i < end; ++i) {
      x = (sequential->begin() + i)->forward(x);
    }
    return x;
  };
  CheckpointOptions options;
  options.preserve_rng_state = preserve_rng_state;
  const int64_t segment_size = n / segments;
  int64_t begin = 0;
  for (int s = 0; s + 1 < segments; ++s) {
    const int64_t end = begin + segment_size;
    input = checkpoint(
        options, [run, begin, end](const at::Tensor& x) mutable { return run(begin, end, x); }, input);
    begin = end;
  }
  return run(begin, n, std::move(input));
}

CheckpointWrapperImpl::CheckpointWrapperImpl(::torch::nn::AnyModule module, CheckpointOptions options)
    : module_(std::move(module)), options_(options) {
  if (module_.is_empty()) {
    throw std::invalid_argument("CheckpointWrapper: the module to wrap is empty");
  }
  register_module("module", module_.ptr());
}

at::Tensor CheckpointWrapperImpl::forward(const at::Tensor& input) {
  if (!is_training() || !at::GradMode::is_enabled()) {
    return module_.forward(input);
  }
  return checkpoint(
      options_, [module = module_](const at::Tensor& x) mutable { return module.forward(x); }, input);
}

void CheckpointWrapperImpl::pretty_print(std::ostream& stream) const {
  stream << "horovodlite::torch::CheckpointWrapper(preserve_rng_state="
         << (options_.preserve_rng_state ? "true" : "false")
         << ", offload_to_cpu=" << (options_.offload_to_cpu ? "true" : "false") << ")";
}

}  // namespace torch
}  // namespace horovodlite
