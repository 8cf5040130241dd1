// Activation checkpointing under data parallelism: checkpoint_sequential with 2,
// 3 and 4 segments under DistributedOptimizer, with and without gradient
// accumulation and fp16 compression. After every step all ranks' parameters
// must be bitwise identical and equal to one process training, without
// checkpointing, on the concatenated batch.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <tuple>

#include "horovodlite/torch/checkpoint.h"
#include "horovodlite/torch/optimizer.h"
#include "torch_test_util.h"

namespace {

using namespace hvl_torch_test;
namespace hvt = horovodlite::torch;

constexpr int64_t kLocalBatch = 4;
constexpr int kSteps = 3;

torch::nn::Sequential make_mlp() {
  torch::manual_seed(7);
  torch::nn::Sequential seq(torch::nn::Linear(6, 8), torch::nn::Tanh(), torch::nn::Linear(8, 8), torch::nn::Tanh(),
                            torch::nn::Linear(8, 8), torch::nn::Tanh(), torch::nn::Linear(8, 3));
  seq->to(torch::kDouble);
  return seq;
}

// Step s, pass k: size() * kLocalBatch rows, the same on every rank.
std::pair<torch::Tensor, torch::Tensor> global_batch(int s, int k) {
  auto gen = at::detail::createCPUGenerator(4242 + 31 * s + k);
  return {at::randn({size() * kLocalBatch, 6}, gen, at::kDouble),
          at::randn({size() * kLocalBatch, 3}, gen, at::kDouble)};
}

torch::Tensor flat(torch::nn::Sequential& m) {
  std::vector<torch::Tensor> ps;
  for (auto& p : m->parameters()) ps.push_back(p.detach().reshape(-1));
  return torch::cat(ps);
}

enum class Opt { kSgdMomentum, kAdam };

std::shared_ptr<torch::optim::Optimizer> make_opt(Opt o, const std::vector<torch::Tensor>& params) {
  if (o == Opt::kAdam) return std::make_shared<torch::optim::Adam>(params, torch::optim::AdamOptions(0.01));
  return std::make_shared<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1).momentum(0.9));
}

using Param = std::tuple<int /*segments*/, int /*passes*/, bool /*fp16*/, Opt>;

class CheckpointDataParallel : public ::testing::TestWithParam<Param> {};

TEST_P(CheckpointDataParallel, RanksIdenticalAndEqualToOneProcess) {
  const auto [segments, passes, fp16, opt_kind] = GetParam();
  const int r = rank();
  torch::nn::Sequential model = make_mlp();
  torch::nn::Sequential reference = make_mlp();  // same seed: same initial weights
  hvt::DistributedOptimizerOptions o;
  o.backward_passes_per_step = passes;
  if (fp16) o.compression = hvt::Compression::kFp16;
  hvt::DistributedOptimizer opt(make_opt(opt_kind, model->parameters()), model->named_parameters(), o);
  auto ref_opt = make_opt(opt_kind, reference->parameters());

  // fp16 on the wire is close, not exact; float64 otherwise is tight.
  const double tol = fp16 ? 2e-3 : 1e-10;
  const std::string tag = "seg" + std::to_string(segments) + ".p" + std::to_string(passes) + (fp16 ? ".fp16" : "");
  for (int s = 0; s < kSteps; ++s) {
    opt.zero_grad();
    for (int k = 0; k < passes; ++k) {
      auto [x, y] = global_batch(s, k);
      torch::Tensor xr = x.slice(0, r * kLocalBatch, (r + 1) * kLocalBatch);
      torch::Tensor yr = y.slice(0, r * kLocalBatch, (r + 1) * kLocalBatch);
      torch::Tensor out = hvt::checkpoint_sequential(model, segments, xr);
      (torch::mse_loss(out, yr) / passes).backward();
    }
    opt.step();

    ref_opt->zero_grad();
    for (int k = 0; k < passes; ++k) {
      auto [x, y] = global_batch(s, k);
      (torch::mse_loss(reference->forward(x), y) / passes).backward();
    }
    ref_opt->step();

    torch::Tensor mine = flat(model);
    ASSERT_TRUE(same_on_all_ranks(mine, "ckdp." + tag + ".step" + std::to_string(s)))
        << "ranks' parameters differ after step " << s << " (" << tag << ")";
    torch::Tensor ref = flat(reference);
    EXPECT_TRUE(torch::allclose(mine, ref, tol, tol))
        << tag << " step " << s << ": max |diff| " << (mine - ref).abs().max().item<double>();
  }
}

INSTANTIATE_TEST_SUITE_P(Segments, CheckpointDataParallel,
                         ::testing::Combine(::testing::Values(2, 3, 4), ::testing::Values(1, 2),
                                            ::testing::Values(false, true),
                                            ::testing::Values(Opt::kSgdMomentum, Opt::kAdam)),
                         [](const auto& info) {
                           return "seg" + std::to_string(std::get<0>(info.param)) + "_passes" +
                                  std::to_string(std::get<1>(info.param)) +
                                  (std::get<2>(info.param) ? "_fp16" : "_fp64") +
                                  (std::get<3>(info.param) == Opt::kAdam ? "_adam" : "_sgd");
                         });

}  // namespace
