// checkpoint_sequential() and CheckpointWrapper: gradients equal the plain
// module's, every parameter's grad accumulator runs once per backward, and the
// argument errors.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>
#include <string>

#include "checkpoint_test_util.h"
#include "horovodlite/torch/checkpoint.h"

namespace {

using hvl_checkpoint_test::AccumulatorCounter;
using hvl_checkpoint_test::expect_same;
using hvl_checkpoint_test::Grads;
using hvl_checkpoint_test::run_backward;
namespace hvt = horovodlite::torch;

const auto kF64 = torch::TensorOptions().dtype(torch::kFloat64);

// Seven modules, with dropout, so that segment boundaries fall everywhere.
torch::nn::Sequential make_stack() {
  torch::nn::Sequential stack(torch::nn::Linear(6, 12), torch::nn::ReLU(), torch::nn::Dropout(0.25),
                              torch::nn::Linear(12, 12), torch::nn::Tanh(), torch::nn::Linear(12, 12),
                              torch::nn::Linear(12, 3));
  stack->to(torch::kFloat64);
  stack->train();
  return stack;
}

TEST(CheckpointSequential, EverySegmentCountMatchesThePlainModule) {
  torch::manual_seed(11);
  auto stack = make_stack();
  const at::Tensor x = torch::randn({5, 6}, kF64);
  const int n = static_cast<int>(stack->size());
  for (bool input_requires_grad : {true, false}) {
    torch::manual_seed(12);
    Grads plain = run_backward(*stack, x, input_requires_grad, [&](const at::Tensor& t) { return stack->forward(t); });
    for (int segments = 1; segments <= n; ++segments) {
      torch::manual_seed(12);
      Grads ckpt = run_backward(*stack, x, input_requires_grad,
                                [&](const at::Tensor& t) { return hvt::checkpoint_sequential(stack, segments, t); });
      expect_same(ckpt, plain,
                  "segments=" + std::to_string(segments) +
                      (input_requires_grad ? " (input requires grad)" : " (input without grad)"));
    }
  }
}

TEST(CheckpointSequential, EachAccumulatorRunsOncePerBackward) {
  torch::manual_seed(13);
  auto stack = make_stack();
  AccumulatorCounter counter(stack->parameters());
  const at::Tensor x = torch::randn({5, 6}, kF64);
  for (int iteration = 0; iteration < 3; ++iteration) {
    for (int segments : {1, 3, 7}) {
      counter.reset();
      run_backward(*stack, x, false,
                   [&](const at::Tensor& t) { return hvt::checkpoint_sequential(stack, segments, t); });
      for (size_t i = 0; i < counter.counts().size(); ++i) {
        EXPECT_EQ(counter.counts()[i], 1) << "param " << i << ", segments " << segments << ", iteration " << iteration;
      }
    }
  }
}

TEST(CheckpointSequential, RejectsBadSegmentCounts) {
  auto stack = make_stack();
  const at::Tensor x = torch::randn({2, 6}, kF64);
  for (int segments : {0, -1, 8}) {
    try {
      hvt::checkpoint_sequential(stack, segments, x);
      FAIL() << "segments=" << segments << " must be rejected";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("between 1 and the number of modules (7)"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(hvt::checkpoint_sequential(torch::nn::Sequential(nullptr), 1, x), std::invalid_argument);
}

// Counts forward calls, to see when the wrapper recomputes.
struct CountingImpl : torch::nn::Module {
  explicit CountingImpl(int64_t width) : linear(register_module("linear", torch::nn::Linear(width, width))) {}
  at::Tensor forward(const at::Tensor& x) {
    ++calls;
    return torch::relu(linear->forward(x));
  }
  torch::nn::Linear linear;
  int calls = 0;
};
TORCH_MODULE(Counting);

TEST(CheckpointWrapper, TrainingModeCheckpointsAndMatchesThePlainModule) {
  torch::manual_seed(14);
  for (bool offload : {false, true}) {
    Counting block(8);
    torch::nn::Linear head(8, 2);
    block->to(torch::kFloat64);
    head->to(torch::kFloat64);
    hvt::CheckpointOptions options;
    options.offload_to_cpu = offload;
    auto wrapped = hvt::checkpoint_wrapper(block, options);
    EXPECT_EQ(wrapped->parameters().size(), block->parameters().size());
    EXPECT_EQ(wrapped->named_parameters().contains("module.linear.weight"), true);

    torch::nn::Module model;  // holds both for run_backward's parameter list
    model.register_module("wrapped", wrapped.ptr());
    model.register_module("head", head.ptr());
    const at::Tensor x = torch::randn({4, 8}, kF64);
    Grads plain = run_backward(model, x, true, [&](const at::Tensor& t) { return head->forward(block->forward(t)); });
    block->calls = 0;
    Grads ckpt = run_backward(model, x, true, [&](const at::Tensor& t) { return head->forward(wrapped->forward(t)); });
    EXPECT_EQ(block->calls, 2) << "forward once, once more in backward";
    expect_same(ckpt, plain, offload ? "wrapper (offload_to_cpu)" : "wrapper");

    AccumulatorCounter counter(model.parameters());
    run_backward(model, x, false, [&](const at::Tensor& t) { return head->forward(wrapped->forward(t)); });
    for (int c : counter.counts()) {
      EXPECT_EQ(c, 1);
    }
  }
}

TEST(CheckpointWrapper, EvalAndNoGradRunPlainly) {
  Counting block(4);
  auto wrapped = hvt::checkpoint_wrapper(block);
  const at::Tensor x = torch::randn({2, 4});
  wrapped->eval();
  EXPECT_FALSE(block->is_training()) << "eval() reaches the wrapped module";
  at::Tensor y = wrapped->forward(x);
  y.sum().backward();
  EXPECT_EQ(block->calls, 1);
  EXPECT_TRUE(block->linear->weight.grad().defined());

  wrapped->train();
  block->calls = 0;
  {
    torch::NoGradGuard no_grad;
    EXPECT_FALSE(wrapped->forward(x).requires_grad());
  }
  EXPECT_EQ(block->calls, 1);
  std::ostringstream printed;
  printed << *wrapped;
  EXPECT_NE(printed.str().find("CheckpointWrapper"), std::string::npos) << printed.str();
}

TEST(CheckpointWrapper, RejectsAnEmptyModule) {
  EXPECT_THROW(hvt::CheckpointWrapper(torch::nn::AnyModule()), std::invalid_argument);
}

}  // namespace
