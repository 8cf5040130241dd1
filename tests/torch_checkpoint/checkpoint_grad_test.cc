// checkpoint(): gradients with checkpointing equal those without, for every shape
// of fn (inputs with and without grad, several outputs, nesting, dropout,
// captured tensors) and the errors it reports.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <tuple>
#include <vector>

#include "checkpoint_test_util.h"
#include "horovodlite/torch/checkpoint.h"

namespace {

using hvl_checkpoint_test::AccumulatorCounter;
using hvl_checkpoint_test::expect_same;
using hvl_checkpoint_test::Grads;
using hvl_checkpoint_test::run_backward;
namespace hvt = horovodlite::torch;

const auto kF64 = torch::TensorOptions().dtype(torch::kFloat64);

torch::nn::Sequential make_mlp() {
  torch::nn::Sequential mlp(torch::nn::Linear(8, 16), torch::nn::Tanh(), torch::nn::Linear(16, 16), torch::nn::ReLU(),
                            torch::nn::Linear(16, 4));
  mlp->to(torch::kFloat64);
  return mlp;
}

torch::nn::Sequential make_cnn() {
  torch::nn::Sequential cnn(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3).padding(1)), torch::nn::ReLU(),
                            torch::nn::MaxPool2d(2), torch::nn::Conv2d(4, 6, 3), torch::nn::Tanh(),
                            torch::nn::Flatten(), torch::nn::Linear(24, 5));
  cnn->to(torch::kFloat64);
  return cnn;
}

torch::nn::Sequential make_dropout_net() {
  torch::nn::Sequential net(torch::nn::Linear(8, 32), torch::nn::Dropout(0.5), torch::nn::ReLU(),
                            torch::nn::Linear(32, 32), torch::nn::Dropout(0.3), torch::nn::Linear(32, 4));
  net->to(torch::kFloat64);
  return net;
}

TEST(Checkpoint, MlpGradientsMatch) {
  torch::manual_seed(1);
  auto mlp = make_mlp();
  const at::Tensor x = torch::randn({5, 8}, kF64);
  Grads plain = run_backward(*mlp, x, true, [&](const at::Tensor& t) { return mlp->forward(t); });
  Grads ckpt = run_backward(*mlp, x, true, [&](const at::Tensor& t) {
    return hvt::checkpoint([&](const at::Tensor& u) { return mlp->forward(u); }, t);
  });
  EXPECT_TRUE(plain.input_grad.defined());
  expect_same(ckpt, plain, "mlp");
}

TEST(Checkpoint, CnnGradientsMatch) {
  torch::manual_seed(2);
  auto cnn = make_cnn();
  const at::Tensor x = torch::randn({2, 3, 8, 8}, kF64);
  Grads plain = run_backward(*cnn, x, true, [&](const at::Tensor& t) { return cnn->forward(t); });
  // The two halves of the network in separate checkpoints.
  Grads ckpt = run_backward(*cnn, x, true, [&](const at::Tensor& t) {
    at::Tensor h = hvt::checkpoint(
        [&](const at::Tensor& u) {
          at::Tensor y = u;
          for (size_t i = 0; i < 3; ++i) y = (cnn->begin() + i)->forward(y);
          return y;
        },
        t);
    return hvt::checkpoint(
        [&](const at::Tensor& u) {
          at::Tensor y = u;
          for (size_t i = 3; i < cnn->size(); ++i) y = (cnn->begin() + i)->forward(y);
          return y;
        },
        h);
  });
  expect_same(ckpt, plain, "cnn");
}

TEST(Checkpoint, DropoutReplaysTheSameMaskAndLeavesTheStreamAlone) {
  auto net = make_dropout_net();
  net->train();
  const at::Tensor x = torch::randn({6, 8}, kF64);
  // Random numbers are drawn between forward and backward and after backward:
  // the recomputation must neither change nor consume them.
  struct Run {
    Grads grads;
    at::Tensor between, after;
  };
  auto run = [&](auto forward) {
    torch::manual_seed(7);
    Run r;
    r.grads = run_backward(*net, x, true, [&](const at::Tensor& t) {
      at::Tensor y = forward(t);
      r.between = torch::rand({4}, kF64);
      return y;
    });
    r.after = torch::rand({8}, kF64);
    return r;
  };
  Run plain = run([&](const at::Tensor& t) { return net->forward(t); });
  Run ckpt = run(
      [&](const at::Tensor& t) { return hvt::checkpoint([&](const at::Tensor& u) { return net->forward(u); }, t); });
  expect_same(ckpt.grads, plain.grads, "dropout");
  expect_same(ckpt.between, plain.between, "random numbers drawn between forward and backward", 0.0);
  expect_same(ckpt.after, plain.after, "random numbers drawn after backward", 0.0);

  // Without preserve_rng_state the recomputation draws another mask: the
  // gradients differ from the plain run (and the check above is meaningful).
  hvt::CheckpointOptions no_rng;
  no_rng.preserve_rng_state = false;
  Run drifted = run([&](const at::Tensor& t) {
    return hvt::checkpoint(
        no_rng, [&](const at::Tensor& u) { return net->forward(u); }, t);
  });
  expect_same(drifted.grads.output, plain.grads.output, "forward output without rng preservation");
  EXPECT_GT((drifted.grads.params[0] - plain.grads.params[0]).abs().max().item<double>(), 1e-6)
      << "gradients should differ when the dropout mask is not replayed";
}

TEST(Checkpoint, InputWithoutGradStillGivesParameterGradients) {
  torch::manual_seed(3);
  auto mlp = make_mlp();
  const at::Tensor x = torch::randn({5, 8}, kF64);
  Grads plain = run_backward(*mlp, x, false, [&](const at::Tensor& t) { return mlp->forward(t); });
  Grads ckpt = run_backward(*mlp, x, false, [&](const at::Tensor& t) {
    at::Tensor y = hvt::checkpoint([&](const at::Tensor& u) { return mlp->forward(u); }, t);
    EXPECT_TRUE(y.requires_grad());
    return y;
  });
  EXPECT_FALSE(ckpt.input_grad.defined());
  expect_same(ckpt, plain, "input without grad");
}

TEST(Checkpoint, SeveralInputsAndOutputs) {
  torch::manual_seed(4);
  const at::Tensor w = torch::randn({4, 4}, kF64).requires_grad_();
  const at::Tensor a0 = torch::randn({3, 4}, kF64);
  const at::Tensor b0 = torch::randn({3, 4}, kF64);
  const at::Tensor c0 = torch::randn({3, 4}, kF64);  // never requires grad
  auto fn = [&](const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
    at::Tensor h = torch::tanh(a.matmul(w) + b * c);
    return std::make_tuple(h * 2, h.sum(1), h.argmax(1), c * 3, (a * b).sum());
  };
  auto run = [&](bool use_checkpoint) {
    w.mutable_grad() = at::Tensor();
    at::Tensor a = a0.clone().requires_grad_(), b = b0.clone().requires_grad_();
    auto outs = use_checkpoint ? hvt::checkpoint(fn, a, b, c0) : fn(a, b, c0);
    EXPECT_TRUE(std::get<0>(outs).requires_grad());
    EXPECT_FALSE(std::get<2>(outs).requires_grad());
    EXPECT_EQ(std::get<2>(outs).scalar_type(), torch::kLong);
    EXPECT_FALSE(std::get<3>(outs).requires_grad());
    // Output 4 is left out of the loss: its gradient never arrives.
    (std::get<0>(outs).pow(2).sum() + std::get<1>(outs).sin().sum()).backward();
    return std::vector<at::Tensor>{std::get<0>(outs).detach(), std::get<2>(outs), a.grad(), b.grad(), w.grad().clone()};
  };
  auto plain = run(false);
  auto ckpt = run(true);
  for (size_t i = 0; i < plain.size(); ++i) {
    expect_same(ckpt[i], plain[i], "multi-output item " + std::to_string(i));
  }
}

TEST(Checkpoint, VectorOverloadAndUndefinedInputs) {
  torch::manual_seed(5);
  const at::Tensor a0 = torch::randn({4}, kF64);
  auto fn = [](const std::vector<at::Tensor>& in) {
    EXPECT_FALSE(in[1].defined());
    return std::vector<at::Tensor>{in[0].exp(), at::Tensor(), in[0] * in[2]};
  };
  const at::Tensor k = torch::full({4}, 3.0, kF64);
  at::Tensor a = a0.clone().requires_grad_();
  auto outs = hvt::checkpoint(fn, {a, at::Tensor(), k});
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_FALSE(outs[1].defined());
  (outs[0].sum() + outs[2].sum()).backward();
  expect_same(a.grad(), a0.exp() + 3.0, "vector overload grad");
}

TEST(Checkpoint, IdentityAndParameterOutputs) {
  const at::Tensor p = torch::randn({3}, kF64).requires_grad_();
  at::Tensor x = torch::randn({3}, kF64).requires_grad_();
  auto [y, q] = hvt::checkpoint([&](const at::Tensor& t) { return std::make_tuple(t, p); }, x);
  (y * 2 + q * 5).sum().backward();
  expect_same(x.grad(), torch::full({3}, 2.0, kF64), "identity grad");
  expect_same(p.grad(), torch::full({3}, 5.0, kF64), "parameter returned as is");
}

TEST(Checkpoint, NestedCheckpoints) {
  torch::manual_seed(6);
  auto mlp = make_mlp();
  auto net = make_dropout_net();
  net->train();
  const at::Tensor x = torch::randn({5, 8}, kF64);
  torch::nn::Module both;  // only to collect the parameters of the two
  both.register_module("mlp", mlp.ptr());
  both.register_module("net", net.ptr());
  auto composite = [&](const at::Tensor& t, bool nested) {
    // fn runs again in backward, after composite returned: capture by value.
    auto inner = [net](const at::Tensor& u) mutable { return net->forward(torch::tanh(u.narrow(1, 0, 8)) * 2); };
    auto outer = [mlp, inner, nested](const at::Tensor& u) mutable {
      at::Tensor h = mlp[0]->as<torch::nn::Linear>()->forward(u);
      h = nested ? hvt::checkpoint(inner, h) : inner(h);
      return h.sin();
    };
    return nested ? hvt::checkpoint(outer, t) : outer(t);
  };
  torch::manual_seed(8);
  Grads plain = run_backward(both, x, true, [&](const at::Tensor& t) { return composite(t, false); });
  torch::manual_seed(8);
  Grads ckpt = run_backward(both, x, true, [&](const at::Tensor& t) { return composite(t, true); });
  // The parameters mlp does not use (layers 2..) get no gradient in either run.
  for (size_t i = 0; i < plain.params.size(); ++i) {
    ASSERT_EQ(ckpt.params[i].defined(), plain.params[i].defined()) << "param " << i;
    if (!plain.params[i].defined()) {
      plain.params[i] = ckpt.params[i] = torch::zeros({1}, kF64);
    }
  }
  expect_same(ckpt, plain, "nested");
}

TEST(Checkpoint, CapturedTensorsAndSharedParametersAccumulateOnce) {
  torch::manual_seed(9);
  torch::nn::Linear first(6, 6), shared(6, 6);
  first->to(torch::kFloat64);
  shared->to(torch::kFloat64);
  std::vector<at::Tensor> params = first->parameters();
  for (auto& p : shared->parameters()) params.push_back(p);
  const at::Tensor x0 = torch::randn({4, 6}, kF64);
  // h is computed outside the checkpoint and captured by fn; `shared` is used in
  // two checkpoints and once outside any.
  auto model = [&](const at::Tensor& x, bool use_checkpoint) {
    at::Tensor h = torch::tanh(first->forward(x));
    auto fn = [shared, h](const at::Tensor& u) mutable { return torch::relu(shared->forward(u)) + h * 0.5; };
    at::Tensor y = use_checkpoint ? hvt::checkpoint(fn, h) : fn(h);
    at::Tensor z = use_checkpoint ? hvt::checkpoint(fn, y) : fn(y);
    return shared->forward(z) + h;
  };
  auto grads = [&](bool use_checkpoint, AccumulatorCounter* counter) {
    for (auto& p : params) p.mutable_grad() = at::Tensor();
    at::Tensor x = x0.clone().requires_grad_();
    model(x, use_checkpoint).pow(2).sum().backward();
    std::vector<at::Tensor> g{x.grad()};
    for (auto& p : params) g.push_back(p.grad().clone());
    return g;
  };
  auto plain = grads(false, nullptr);
  AccumulatorCounter counter(params);
  for (int iteration = 0; iteration < 3; ++iteration) {
    counter.reset();
    auto ckpt = grads(true, &counter);
    for (size_t i = 0; i < plain.size(); ++i) {
      expect_same(ckpt[i], plain[i], "captured/shared item " + std::to_string(i));
    }
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_EQ(counter.counts()[i], 1) << "accumulator of param " << i << ", iteration " << iteration;
    }
  }
}

TEST(Checkpoint, AutogradGradWorksAndDoesNotAccumulate) {
  torch::manual_seed(10);
  auto mlp = make_mlp();
  const at::Tensor x = torch::randn({5, 8}, kF64).requires_grad_();
  const at::Tensor w = mlp[0]->as<torch::nn::Linear>()->weight;
  auto plain = torch::autograd::grad({mlp->forward(x).pow(2).sum()}, {x, w});
  auto y = hvt::checkpoint([&](const at::Tensor& u) { return mlp->forward(u); }, x);
  auto ckpt = torch::autograd::grad({y.pow(2).sum()}, {x, w});
  expect_same(ckpt[0], plain[0], "grad() input");
  expect_same(ckpt[1], plain[1], "grad() weight");
  for (auto& p : mlp->parameters()) {
    EXPECT_FALSE(p.grad().defined());
  }
}

TEST(Checkpoint, NoGradModeJustRunsFn) {
  auto mlp = make_mlp();
  const at::Tensor x = torch::randn({2, 8}, kF64).requires_grad_();
  int calls = 0;
  torch::NoGradGuard no_grad;
  at::Tensor y = hvt::checkpoint(
      [&](const at::Tensor& u) {
        ++calls;
        return mlp->forward(u);
      },
      x);
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(y.requires_grad());
  expect_same(y, mlp->forward(x), "no-grad output");
}

class WarningCollector : public horovodlite::torch::compat::WarningHandler {
 public:
  void on_warning(const std::string& msg) override { messages.push_back(msg); }
  std::vector<std::string> messages;
};

TEST(Checkpoint, WarnsWhenNothingRequiresGrad) {
  WarningCollector collector;
  horovodlite::torch::compat::WarningHandlerGuard guard(&collector);
  const at::Tensor x = torch::randn({3}, kF64);
  at::Tensor y = hvt::checkpoint([](const at::Tensor& u) { return u * 2; }, x);
  EXPECT_FALSE(y.requires_grad());
  ASSERT_EQ(collector.messages.size(), 1u);
  EXPECT_NE(collector.messages[0].find("none of the inputs require grad"), std::string::npos) << collector.messages[0];
}

TEST(Checkpoint, SecondBackwardNeedsRetainGraph) {
  const at::Tensor x = torch::randn({3}, kF64).requires_grad_();
  auto fn = [](const at::Tensor& u) { return u.pow(3); };
  at::Tensor y = hvt::checkpoint(fn, x).sum();
  y.backward({}, /*retain_graph=*/true);
  y.backward();
  expect_same(x.grad(), 6 * x.detach().pow(2), "two backwards with retain_graph");
  try {
    y.backward();
    FAIL() << "a third backward after the graph was freed must throw";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("second time"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, InPlaceChangeOfASavedInputIsAnError) {
  at::Tensor base = torch::randn({3}, kF64).requires_grad_();
  at::Tensor x = base * 1.0;  // a non-leaf, so it may be changed in place
  at::Tensor y = hvt::checkpoint([](const at::Tensor& u) { return u.sin(); }, x);
  x.add_(1.0);
  try {
    y.sum().backward();
    FAIL() << "backward must detect the in-place change";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("in-place"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, HigherOrderGradientsAreRefused) {
  at::Tensor x = torch::randn({3}, kF64).requires_grad_();
  at::Tensor y = hvt::checkpoint([](const at::Tensor& u) { return u.pow(3); }, x).sum();
  try {
    torch::autograd::grad({y}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/true);
    FAIL() << "create_graph=true must be refused";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("higher-order"), std::string::npos) << e.what();
  }
}

}  // namespace
