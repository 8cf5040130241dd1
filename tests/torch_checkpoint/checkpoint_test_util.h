// Helpers shared by the checkpoint test files.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "horovodlite/torch/compat.h"

namespace hvl_checkpoint_test {

// Gradients of a module's parameters and of an input after one backward.
struct Grads {
  at::Tensor output;
  at::Tensor input_grad;  // undefined when the input needs no grad
  std::vector<at::Tensor> params;
};

inline void zero_grads(torch::nn::Module& module) {
  for (auto& p : module.parameters()) {
    p.mutable_grad() = at::Tensor();
  }
}

// Runs forward(x) and backward of sum(out^2) from zeroed gradients; x is a fresh
// copy of `input` that requires grad when requires_grad is true.
template <typename Forward>
Grads run_backward(torch::nn::Module& module, const at::Tensor& input, bool requires_grad, Forward forward) {
  zero_grads(module);
  at::Tensor x = input.detach().clone().requires_grad_(requires_grad);
  at::Tensor out = forward(x);
  out.pow(2).sum().backward();
  Grads g;
  g.output = out.detach();
  g.input_grad = x.grad();
  for (auto& p : module.parameters()) {
    g.params.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
  }
  return g;
}

inline void expect_same(const at::Tensor& a, const at::Tensor& b, const std::string& what, double tol = 1e-12) {
  ASSERT_EQ(a.defined(), b.defined()) << what;
  if (!a.defined()) {
    return;
  }
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  const double diff = (a - b).abs().max().item<double>();
  const double scale = std::max(1.0, b.abs().max().item<double>());
  EXPECT_LE(diff, tol * scale) << what << ": max |a - b| = " << diff;
}

inline void expect_same(const Grads& a, const Grads& b, const std::string& what, double tol = 1e-12) {
  expect_same(a.output, b.output, what + " output", tol);
  expect_same(a.input_grad, b.input_grad, what + " input grad", tol);
  ASSERT_EQ(a.params.size(), b.params.size()) << what;
  for (size_t i = 0; i < a.params.size(); ++i) {
    ASSERT_TRUE(b.params[i].defined()) << what << ": reference param " << i << " has no grad";
    expect_same(a.params[i], b.params[i], what + " param " + std::to_string(i), tol);
  }
}

// Counts how often the grad accumulator of each parameter runs, through a post
// hook on torch::autograd::impl::grad_accumulator(param), the node Horovod-style
// optimizers hook. Holds the accumulators so the hooks stay registered.
class AccumulatorCounter {
 public:
  explicit AccumulatorCounter(const std::vector<at::Tensor>& params)
      : counts_(std::make_shared<std::vector<int>>(params.size(), 0)) {
    for (size_t i = 0; i < params.size(); ++i) {
      auto acc = torch::autograd::impl::grad_accumulator(params[i]);
      acc->add_post_hook(std::make_unique<Hook>(counts_, i));
      accumulators_.push_back(std::move(acc));
    }
  }
  const std::vector<int>& counts() const { return *counts_; }
  void reset() { std::fill(counts_->begin(), counts_->end(), 0); }

 private:
  struct Hook : torch::autograd::FunctionPostHook {
    Hook(std::shared_ptr<std::vector<int>> counts, size_t index) : counts_(std::move(counts)), index_(index) {}
    torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                              const torch::autograd::variable_list&) override {
      ++(*counts_)[index_];
      return outputs;
    }
    std::shared_ptr<std::vector<int>> counts_;
    size_t index_;
  };
  std::shared_ptr<std::vector<int>> counts_;
  std::vector<horovodlite::torch::compat::NodeHandle> accumulators_;
};

}  // namespace hvl_checkpoint_test
