// Process sets through the LibTorch adapter: DistributedOptimizer on a subset of
// the ranks equals one process on the subset's concatenated batch (Average
// divides by the set's size), broadcast_parameters / broadcast_optimizer_state
// from the set's root, and the adapter's collectives with a process set.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "horovodlite/torch/broadcast.h"
#include "horovodlite/torch/error.h"
#include "horovodlite/torch/optimizer.h"
#include "torch_test_util.h"

namespace {

using namespace hvl_torch_test;
namespace hvt = horovodlite::torch;

constexpr int64_t kIn = 6, kOut = 2, kLocalBatch = 3;

torch::nn::Sequential make_net() {
  torch::manual_seed(99);
  torch::nn::Sequential net(torch::nn::Linear(kIn, 5), torch::nn::Tanh(), torch::nn::Linear(5, kOut));
  net->to(torch::kDouble);
  return net;
}

// Ranks 1..size-1 (rank 1 alone at np 2; {0, 1} would be the global set).
std::vector<int> subset() {
  std::vector<int> r;
  for (int i = 1; i < size(); ++i) r.push_back(i);
  return r;
}

class TorchProcessSets : public ::testing::Test {
 protected:
  void SetUp() override { set_ = hvt::add_process_set(subset()); }
  void TearDown() override { hvt::remove_process_set(set_); }
  hvt::ProcessSet set_;
};

}  // namespace

TEST_F(TorchProcessSets, DistributedOptimizerOnASubsetEqualsOneProcessOnTheConcatenatedBatch) {
  if (!set_.included()) {
    EXPECT_EQ(set_.rank(), -1);
    return;  // rank 0 takes no part
  }
  const int n = set_.size(), r = set_.rank();
  auto net = make_net();
  auto reference = make_net();
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const auto& p : net->named_parameters()) named.emplace_back(p.key(), p.value());
  hvt::DistributedOptimizerOptions options;
  options.process_set = set_;
  hvt::DistributedOptimizer opt(
      std::make_shared<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)), named,
      options);
  torch::optim::SGD ref_opt(reference->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < 4; ++step) {
    auto gen = at::detail::createCPUGenerator(500 + step);
    at::Tensor x = at::randn({n * kLocalBatch, kIn}, gen, at::kDouble);
    at::Tensor y = at::randn({n * kLocalBatch, kOut}, gen, at::kDouble);
    opt.zero_grad();
    torch::mse_loss(net->forward(x.slice(0, r * kLocalBatch, (r + 1) * kLocalBatch)),
                    y.slice(0, r * kLocalBatch, (r + 1) * kLocalBatch))
        .backward();
    opt.step();
    ref_opt.zero_grad();
    torch::mse_loss(reference->forward(x), y).backward();
    ref_opt.step();
  }
  auto got = net->parameters();
  auto want = reference->parameters();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-9, 1e-12)) << i;
}

TEST_F(TorchProcessSets, BroadcastParametersAndOptimizerStateFromTheSetsRoot) {
  if (!set_.included()) return;
  const int root = set_.ranks().back();  // a global rank
  auto net = make_net();
  {
    torch::NoGradGuard no_grad;
    for (auto& p : net->parameters()) p.add_(rank());
  }
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.5 + rank()).momentum(0.9));
  if (rank() == root) {  // root has momentum buffers
    torch::mse_loss(net->forward(torch::ones({2, kIn}, torch::kDouble)), torch::zeros({2, kOut}, torch::kDouble))
        .backward();
    opt.step();
  }
  hvt::broadcast_parameters(*net, root, set_);
  hvt::broadcast_optimizer_state(opt, root, set_);
  auto fresh = make_net();
  auto got = net->parameters();
  for (size_t i = 0; i < got.size(); ++i) {
    at::Tensor all = hvt::allgather(got[i].detach().unsqueeze(0), "param." + std::to_string(i), set_);
    for (int j = 0; j < set_.size(); ++j) EXPECT_TRUE(at::equal(all[j], got[i])) << i;
  }
  EXPECT_DOUBLE_EQ(static_cast<torch::optim::SGDOptions&>(opt.param_groups()[0].options()).lr(), 0.5 + root);
  EXPECT_EQ(opt.state().size(), 4u);  // root's momentum buffers
}

TEST_F(TorchProcessSets, CollectivesOnTheSetAndTheWorldAtOnce) {
  at::Tensor t = torch::full({2}, static_cast<double>(rank()), torch::kDouble);
  hvt::AllreduceOptions sum;
  sum.op = hvt::Sum;
  hvt::AsyncHandle world = hvt::allreduce_async(t, "same_name", sum);
  if (set_.included()) {
    sum.process_set = set_;
    hvt::AsyncHandle on_set = hvt::allreduce_async(t, "same_name", sum);
    int expect = 0;
    for (int g : set_.ranks()) expect += g;
    EXPECT_EQ(on_set.synchronize()[0].item<double>(), expect);
    hvt::AlltoallResult a2a = hvt::alltoall(torch::full({set_.size()}, rank(), torch::kInt), {}, "a2a", set_);
    for (int j = 0; j < set_.size(); ++j) EXPECT_EQ(a2a.output[j].item<int>(), set_.ranks()[j]);
    hvt::barrier(set_);
  } else {
    sum.process_set = set_;
    EXPECT_THROW(hvt::allreduce(t, "outside", sum), hvt::HorovodError);
  }
  EXPECT_EQ(world.synchronize()[0].item<double>(), size() * (size() - 1) / 2);
}
