// DistributedOptimizer with op Adasum (Horovod's Adasum optimizer): each rank's
// optimizer steps locally, the updates are combined with Adasum and applied to
// the parameters from before the step. Compared with a simulation on every rank
// of every rank's optimizer (its own momentum state) and a double-precision
// reference of the recursive Adasum; every rank ends with the same parameters.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "horovodlite/torch/error.h"
#include "horovodlite/torch/optimizer.h"
#include "torch_test_util.h"

namespace {

using namespace hvl_torch_test;
using hvt::DistributedOptimizer;
using hvt::DistributedOptimizerOptions;

bool power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

torch::nn::Sequential make_net() {
  torch::manual_seed(42);
  torch::nn::Sequential net(torch::nn::Linear(5, 4), torch::nn::Tanh(), torch::nn::Linear(4, 2));
  net->to(torch::kDouble);
  return net;
}

std::pair<torch::Tensor, torch::Tensor> batch(int r, int step, int micro) {
  auto gen = at::detail::createCPUGenerator(500 + 100 * r + 10 * step + micro);
  return {torch::randn({6, 5}, gen, torch::kDouble), torch::randn({6, 2}, gen, torch::kDouble)};
}

std::shared_ptr<torch::optim::SGD> make_sgd(const std::vector<torch::Tensor>& params) {
  return std::make_shared<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.01));
}

// Adasum of one tensor per rank: pairs (0,1), (2,3), ..., then at distance 2, ...
torch::Tensor adasum_ref(std::vector<torch::Tensor> v) {
  for (size_t d = 1; d < v.size(); d *= 2) {
    for (size_t r = 0; r < v.size(); r += 2 * d) {
      const torch::Tensor a = v[r], b = v[r + d];
      const double dot = (a * b).sum().item<double>(), aa = (a * a).sum().item<double>(),
                   bb = (b * b).sum().item<double>();
      const double ca = aa > 0 ? 1 - dot / (2 * aa) : 1, cb = bb > 0 ? 1 - dot / (2 * bb) : 1;
      v[r] = ca * a + cb * b;
    }
  }
  return v[0];
}

void loss_backward(torch::nn::Sequential& net, int r, int step, int micro) {
  auto [x, y] = batch(r, step, micro);
  torch::mse_loss(net->forward(x), y).backward();
}

// The parameters after `steps` steps, simulated: every rank's replica and
// optimizer start each step from the common parameters.
std::vector<torch::Tensor> simulate(int steps, int passes) {
  std::vector<torch::nn::Sequential> nets;
  std::vector<std::shared_ptr<torch::optim::SGD>> opts;
  for (int r = 0; r < size(); ++r) {
    nets.push_back(make_net());
    opts.push_back(make_sgd(nets.back()->parameters()));
  }
  std::vector<torch::Tensor> params;
  for (const auto& p : make_net()->parameters()) params.push_back(p.detach().clone());
  for (int step = 0; step < steps; ++step) {
    std::vector<std::vector<torch::Tensor>> deltas(params.size());
    for (int r = 0; r < size(); ++r) {
      {
        torch::NoGradGuard g;
        auto ps = nets[r]->parameters();
        for (size_t i = 0; i < ps.size(); ++i) ps[i].copy_(params[i]);
      }
      opts[r]->zero_grad();
      for (int m = 0; m < passes; ++m) loss_backward(nets[r], r, step, m);
      opts[r]->step();
      auto ps = nets[r]->parameters();
      for (size_t i = 0; i < ps.size(); ++i) deltas[i].push_back(ps[i].detach() - params[i]);
    }
    for (size_t i = 0; i < params.size(); ++i) params[i] = params[i] + adasum_ref(deltas[i]);
  }
  return params;
}

void run_and_compare(int passes, const std::string& tag) {
  const int steps = 3;
  torch::nn::Sequential net = make_net();
  DistributedOptimizerOptions o;
  o.op = horovodlite::ReduceOp::kAdasum;
  o.backward_passes_per_step = passes;
  DistributedOptimizer opt(make_sgd(net->parameters()), net->named_parameters(), o);
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    for (int m = 0; m < passes; ++m) loss_backward(net, rank(), step, m);
    opt.step();
  }
  const std::vector<torch::Tensor> want = simulate(steps, passes);
  auto ps = net->parameters();
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_TRUE(torch::allclose(ps[i].detach(), want[i], 1e-9, 1e-12)) << tag << " parameter " << i;
    EXPECT_TRUE(same_on_all_ranks(ps[i], tag + ".param" + std::to_string(i))) << tag << " parameter " << i;
  }
}

TEST(AdasumOptimizer, MatchesTheSimulatedReference) {
  if (!power_of_two(size())) GTEST_SKIP() << "Adasum needs a power-of-two number of ranks";
  run_and_compare(1, "adasum.bpps1");
}

TEST(AdasumOptimizer, BackwardPassesPerStepAccumulateBeforeTheLocalStep) {
  if (!power_of_two(size())) GTEST_SKIP() << "Adasum needs a power-of-two number of ranks";
  run_and_compare(2, "adasum.bpps2");
}

TEST(AdasumOptimizer, ClearErrors) {
  torch::nn::Sequential net = make_net();
  DistributedOptimizerOptions o;
  o.op = horovodlite::ReduceOp::kAdasum;
  o.gradient_predivide_factor = 2.0;
  EXPECT_THROW(DistributedOptimizer(make_sgd(net->parameters()), net->named_parameters(), o), hvt::HorovodError);
  if (power_of_two(size())) return;
  o.gradient_predivide_factor = 1.0;
  DistributedOptimizer opt(make_sgd(net->parameters()), net->named_parameters(), o);
  loss_backward(net, rank(), 0, 0);
  const torch::Tensor before = net->parameters()[0].detach().clone();
  try {
    opt.step();
    ADD_FAILURE() << "step() with Adasum on " << size() << " ranks did not throw";
  } catch (const hvt::HorovodError& e) {
    EXPECT_NE(std::string(e.what()).find("power-of-two"), std::string::npos) << e.what();
    // The core's error, naming the tensor and the rank.
    EXPECT_NE(std::string(e.what()).find("tensor 'allreduce."), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(on rank " + std::to_string(rank()) + ")"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(torch::equal(before, net->parameters()[0].detach()));  // nothing stepped
}

}  // namespace
