// DistributedOptimizer on np ranks with local batch b must match one process on
// the concatenated batch, and leave every rank's parameters bitwise identical.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <mutex>

#include "horovodlite/torch/broadcast.h"
#include "horovodlite/torch/error.h"
#include "horovodlite/torch/optimizer.h"
#include "torch_test_util.h"

namespace {

using namespace hvl_torch_test;
namespace hvt = horovodlite::torch;
using hvt::DistributedOptimizer;
using hvt::DistributedOptimizerOptions;

constexpr int64_t kIn = 5, kHidden = 7, kOut = 3, kLocalBatch = 4;

// Two branches whose evaluation order can depend on the rank, so that the
// gradient hooks fire in different orders on different ranks; `head_b` is used
// only where use_b(rank) says so, and `unused` never.
struct NetImpl : torch::nn::Module {
  NetImpl() {
    left = register_module("left", torch::nn::Linear(kIn, kHidden));
    right = register_module("right", torch::nn::Linear(kIn, kHidden));
    head_a = register_module("head_a", torch::nn::Linear(kHidden, kOut));
    head_b = register_module("head_b", torch::nn::Linear(kHidden, kOut));
    unused = register_parameter("unused", torch::ones({2, 2}));
  }
  torch::Tensor forward(const torch::Tensor& x, bool left_first, bool use_b) {
    torch::Tensor l, r;
    if (left_first) {
      l = torch::tanh(left(x));
      r = torch::sigmoid(right(x));
    } else {
      r = torch::sigmoid(right(x));
      l = torch::tanh(left(x));
    }
    torch::Tensor h = l * r + l;
    return use_b ? head_b(h) : head_a(h);
  }
  torch::nn::Linear left{nullptr}, right{nullptr}, head_a{nullptr}, head_b{nullptr};
  torch::Tensor unused;
};
TORCH_MODULE(Net);

Net make_net() {
  torch::manual_seed(1234);
  Net net;
  net->to(torch::kDouble);
  return net;
}

// The global batch of step `step`, micro-batch `micro`: size() * kLocalBatch rows.
std::pair<torch::Tensor, torch::Tensor> global_batch(int step, int micro) {
  auto gen = at::detail::createCPUGenerator(1000 + 17 * step + micro);
  torch::Tensor x = at::randn({size() * kLocalBatch, kIn}, gen, at::kDouble);
  torch::Tensor y = at::randn({size() * kLocalBatch, kOut}, gen, at::kDouble);
  return {x, y};
}

torch::Tensor rows_of(const torch::Tensor& t, int r) { return t.slice(0, r * kLocalBatch, (r + 1) * kLocalBatch); }

struct Scenario {
  bool rank_dependent_order = false;
  bool head_b_on_rank0_only = false;  // else head_a everywhere
};

// Loss of rank r's rows; head_b on rank 0 only when asked.
torch::Tensor local_loss(Net& net, const torch::Tensor& x, const torch::Tensor& y, int r, const Scenario& s) {
  const bool left_first = s.rank_dependent_order ? r % 2 == 0 : true;
  const bool use_b = s.head_b_on_rank0_only && r == 0;
  return torch::mse_loss(net->forward(rows_of(x, r), left_first, use_b), rows_of(y, r));
}

using OptimizerFactory = std::function<std::shared_ptr<torch::optim::Optimizer>(Net&)>;

// Runs `steps` steps distributed and as one process on the whole batch (the
// average of the ranks' losses); checks they agree and that ranks are identical.
void compare_with_single_process(const OptimizerFactory& make_opt, const DistributedOptimizerOptions& options,
                                 const Scenario& setup, int steps, double tol, const std::string& tag) {
  Net net = make_net(), ref = make_net();
  DistributedOptimizer opt(make_opt(net), net->named_parameters(), options);
  auto ref_opt = make_opt(ref);
  const int passes = options.backward_passes_per_step;
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    ref_opt->zero_grad();
    for (int micro = 0; micro < passes; ++micro) {
      auto batch = global_batch(step, micro);
      local_loss(net, batch.first, batch.second, rank(), setup).backward();
      torch::Tensor total = torch::zeros({}, torch::kDouble);
      for (int r = 0; r < size(); ++r) total = total + local_loss(ref, batch.first, batch.second, r, setup);
      const double scale = options.op == horovodlite::ReduceOp::kSum ? 1.0 : 1.0 / size();
      (total * scale).backward();
    }
    opt.step();
    ref_opt->step();
    for (const auto& item : net->named_parameters()) {
      const torch::Tensor& mine = item.value();
      const torch::Tensor& theirs = ref->named_parameters()[item.key()];
      EXPECT_TRUE(torch::allclose(mine, theirs, tol, tol))
          << tag << " step " << step << " " << item.key() << " max diff " << (mine - theirs).abs().max().item<double>();
      EXPECT_TRUE(same_on_all_ranks(mine, tag + ".check." + item.key())) << tag << " " << item.key();
    }
  }
}

OptimizerFactory sgd_momentum() {
  return [](Net& n) {
    return std::make_shared<torch::optim::SGD>(n->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  };
}
OptimizerFactory adam() {
  return [](Net& n) { return std::make_shared<torch::optim::Adam>(n->parameters(), torch::optim::AdamOptions(0.01)); };
}

TEST(DistributedOptimizer, SgdMomentumMatchesSingleProcess) {
  compare_with_single_process(sgd_momentum(), {}, {}, 3, 1e-10, "sgd");
}

TEST(DistributedOptimizer, AdamMatchesSingleProcess) { compare_with_single_process(adam(), {}, {}, 3, 1e-8, "adam"); }

TEST(DistributedOptimizer, SumOpAndPredivide) {
  DistributedOptimizerOptions sum;
  sum.op = horovodlite::ReduceOp::kSum;
  compare_with_single_process(sgd_momentum(), sum, {}, 2, 1e-10, "sum");
  DistributedOptimizerOptions predivide;
  predivide.gradient_predivide_factor = 2.0;
  compare_with_single_process(sgd_momentum(), predivide, {}, 2, 1e-10, "predivide");
}

TEST(DistributedOptimizer, BackwardPassesPerStep) {
  for (int passes : {2, 3}) {
    DistributedOptimizerOptions o;
    o.backward_passes_per_step = passes;
    compare_with_single_process(sgd_momentum(), o, {}, 2, 1e-10, "bpps" + std::to_string(passes));
    compare_with_single_process(adam(), o, {}, 2, 1e-8, "bpps.adam" + std::to_string(passes));
  }
}

TEST(DistributedOptimizer, Fp16CompressionIsCloseAndRestoresDtype) {
  DistributedOptimizerOptions o;
  o.compression = hvt::Compression::kFp16;
  compare_with_single_process(sgd_momentum(), o, {}, 2, 5e-3, "fp16");
  // Gradients come back as float64, and differ from the exact ones only by fp16 rounding.
  Net net = make_net();
  DistributedOptimizer opt(std::make_shared<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.1)),
                           net->named_parameters(), o);
  auto batch = global_batch(7, 0);
  local_loss(net, batch.first, batch.second, rank(), {}).backward();
  opt.synchronize();
  for (const auto& p : net->parameters()) ASSERT_EQ(p.grad().scalar_type(), torch::kDouble);
  EXPECT_TRUE(same_on_all_ranks(net->left->weight.grad(), "fp16.grad"));
  opt.step();
}

// bf16 on the wire: 8 significant bits (about 8x coarser than fp16), so the
// training stays within 2e-2 of float64's after two steps.
TEST(DistributedOptimizer, Bf16CompressionIsCloseAndRestoresDtype) {
  DistributedOptimizerOptions o;
  o.compression = hvt::Compression::kBf16;
  compare_with_single_process(sgd_momentum(), o, {}, 2, 2e-2, "bf16");
  o.gradient_predivide_factor = 2.0;  // the prescale is applied before the cast to bf16
  compare_with_single_process(sgd_momentum(), o, {}, 2, 2e-2, "bf16.predivide");
  o.gradient_predivide_factor = 1.0;
  Net net = make_net();
  DistributedOptimizer opt(std::make_shared<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.1)),
                           net->named_parameters(), o);
  auto batch = global_batch(7, 0);
  local_loss(net, batch.first, batch.second, rank(), {}).backward();
  opt.synchronize();
  for (const auto& p : net->parameters()) {
    ASSERT_EQ(p.grad().scalar_type(), torch::kDouble);
    // Every averaged gradient is a bf16 value widened: exact in bfloat16.
    EXPECT_TRUE(torch::equal(p.grad(), p.grad().to(torch::kBFloat16).to(torch::kDouble)));
  }
  EXPECT_TRUE(same_on_all_ranks(net->left->weight.grad(), "bf16.grad"));
  opt.step();
}

TEST(DistributedOptimizer, UnusedParametersAndRankDependentHookOrder) {
  Scenario s;
  s.rank_dependent_order = true;
  s.head_b_on_rank0_only = true;
  compare_with_single_process(sgd_momentum(), {}, s, 3, 1e-10, "unused");
  compare_with_single_process(adam(), {}, s, 2, 1e-8, "unused.adam");

  // The hooks really fire in a rank-dependent order: record it with tensor hooks.
  Net net = make_net();
  std::vector<std::string> order;
  std::mutex mu;
  for (const auto& item : net->named_parameters()) {
    std::string name = item.key();
    item.value().register_hook([&order, &mu, name](torch::Tensor g) {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(name);
      return g;
    });
  }
  DistributedOptimizer opt(std::make_shared<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.0)),
                           net->named_parameters());
  auto batch = global_batch(0, 0);
  local_loss(net, batch.first, batch.second, rank(), s).backward();
  opt.step();
  // Parameter never used: its gradient is zeros (as Horovod does), the same everywhere.
  ASSERT_TRUE(net->unused.grad().defined());
  EXPECT_TRUE(net->unused.grad().eq(0).all().item<bool>());
  const auto it_left = std::find(order.begin(), order.end(), "left.weight");
  const auto it_right = std::find(order.begin(), order.end(), "right.weight");
  ASSERT_TRUE(it_left != order.end() && it_right != order.end());
  const int64_t left_before_right = it_left < it_right ? 1 : 0;
  at::Tensor flags = hvt::allgather(at::full({1}, left_before_right, at::kLong), "hook.order");
  if (size() >= 2) {
    EXPECT_NE(flags[0].item<int64_t>(), flags[1].item<int64_t>()) << "hook orders did not differ";
  }
}

TEST(DistributedOptimizer, TooManyBackwardPassesIsAnError) {
  for (int passes : {1, 2}) {
    Net net = make_net();
    DistributedOptimizerOptions o;
    o.backward_passes_per_step = passes;
    DistributedOptimizer opt(std::make_shared<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.1)),
                             net->named_parameters(), o);
    auto batch = global_batch(3, 0);
    for (int i = 0; i < passes; ++i) local_loss(net, batch.first, batch.second, rank(), {}).backward();
    try {
      local_loss(net, batch.first, batch.second, rank(), {}).backward();
      FAIL() << "backward pass " << passes + 1 << " before step() must fail";
    } catch (const hvt::HorovodError& e) {  // the autograd engine rethrows the hook's exception as is
      EXPECT_EQ(e.code(), horovodlite::StatusCode::kPrecondition);
      EXPECT_NE(std::string(e.what()).find("Gradients were computed more than backward_passes_per_step times "
                                           "before call to step()"),
                std::string::npos)
          << e.what();
    }
    EXPECT_THROW(opt.zero_grad(), hvt::HorovodError);  // allreduces are pending
    opt.step();                                        // drains them; training goes on
    // The extra pass raced with the in-flight allreduces; start again from root's values.
    hvt::broadcast_parameters(*net, 0);
    opt.zero_grad();
    for (int i = 0; i < passes; ++i) local_loss(net, batch.first, batch.second, rank(), {}).backward();
    opt.step();
    for (const auto& item : net->named_parameters()) {
      EXPECT_TRUE(same_on_all_ranks(item.value(), "toomany." + item.key()));
    }
  }
}

// Issue 19: no gradient-sized copy per parameter; the average lands in the
// gradient autograd made (also with fp16 on the wire), the same on every rank.
TEST(DistributedOptimizer, GradientsAreAveragedInTheirOwnMemory) {
  for (const auto compression : {hvt::Compression::kNone, hvt::Compression::kFp16, hvt::Compression::kBf16}) {
    Net net = make_net();
    DistributedOptimizerOptions options;
    options.compression = compression;
    DistributedOptimizer opt(std::make_shared<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.1)),
                             net->named_parameters(), options);
    for (int step = 0; step < 2; ++step) {
      opt.zero_grad();
      auto batch = global_batch(7 + step, 0);
      local_loss(net, batch.first, batch.second, rank(), {}).backward();
      std::vector<const void*> before;
      for (const auto& p : net->parameters()) before.push_back(p.grad().defined() ? p.grad().data_ptr() : nullptr);
      opt.synchronize();
      size_t i = 0;
      for (const auto& p : net->parameters()) {
        ASSERT_TRUE(p.grad().defined());
        // Parameters without a gradient get zeros allocated at synchronize().
        if (before[i] != nullptr) {
          EXPECT_EQ(p.grad().data_ptr(), before[i]) << "parameter " << i << ", step " << step;
        }
        EXPECT_TRUE(same_on_all_ranks(p.grad(), "own." + std::to_string(step) + "." + std::to_string(i)));
        ++i;
      }
      opt.step();
    }
  }
}

TEST(DistributedOptimizer, SynchronizeThenStepDoesNotAllreduceAgain) {
  Net net = make_net();
  DistributedOptimizer opt(std::make_shared<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(1.0)),
                           net->named_parameters());
  auto batch = global_batch(5, 0);
  local_loss(net, batch.first, batch.second, rank(), {}).backward();
  opt.synchronize();
  torch::Tensor w0 = net->left->weight.detach().clone();
  torch::Tensor g = net->left->weight.grad().clone();
  EXPECT_TRUE(same_on_all_ranks(g, "sync.grad"));
  // A rank-dependent change after synchronize() (as clipping would be) must survive step().
  {
    torch::NoGradGuard no_grad;
    for (auto& p : net->parameters()) p.grad().mul_(rank() + 1);
  }
  opt.step();
  EXPECT_TRUE(torch::allclose(net->left->weight, w0 - g * (rank() + 1), 1e-12, 1e-12));
  // The next step synchronizes again.
  opt.zero_grad();
  local_loss(net, batch.first, batch.second, rank(), {}).backward();
  opt.step();
  EXPECT_TRUE(same_on_all_ranks(net->left->weight.grad(), "sync.again"));
  hvt::broadcast_parameters(*net, 0);
  EXPECT_TRUE(same_on_all_ranks(net->left->weight, "sync.after"));
}

TEST(DistributedOptimizer, RejectsBadArguments) {
  Net net = make_net();
  auto sgd = std::make_shared<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.1));
  DistributedOptimizerOptions bad;
  bad.backward_passes_per_step = 0;
  EXPECT_THROW(DistributedOptimizer(sgd, net->named_parameters(), bad), hvt::HorovodError);
  bad = {};
  bad.op = horovodlite::ReduceOp::kMax;
  EXPECT_THROW(DistributedOptimizer(sgd, net->named_parameters(), bad), hvt::HorovodError);
  hvt::NamedTensors partial = {{"left.weight", net->left->weight}};
  EXPECT_THROW(DistributedOptimizer(sgd, partial), hvt::HorovodError);
  hvt::NamedTensors dup = {{"a", net->left->weight}, {"a", net->left->bias}};
  EXPECT_THROW(DistributedOptimizer(sgd, dup), hvt::HorovodError);
  // Unnamed: positional names.
  DistributedOptimizer unnamed(sgd, hvt::NamedTensors{});
  EXPECT_EQ(unnamed.allreduce_names().front(), "allreduce.noname.0.0");
}

}  // namespace
