// A LibTorch program built against the installed horovodlite: every rank starts
// from its own random parameters, rank 0's are broadcast, then each rank trains
// on its own data with a DistributedOptimizer. Exits non-zero unless every rank
// ends with the same parameters as rank 0 (and they moved).
#include <torch/torch.h>

#include <cstdio>
#include <cstring>

#include "horovodlite/torch.h"
#include "horovodlite/version.h"

namespace hvd = horovodlite::torch;

int main() {
  if (std::strcmp(HVL_VERSION_STRING, HVL_EXPECTED_VERSION) != 0) {
    std::fprintf(stderr, "version.h says %s, find_package found %s\n", HVL_VERSION_STRING, HVL_EXPECTED_VERSION);
    return 1;
  }
  hvd::init();
  const int rank = hvd::rank();
  torch::manual_seed(1000 + rank);  // different initial parameters on every rank
  torch::nn::Sequential model(torch::nn::Linear(8, 16), torch::nn::Tanh(), torch::nn::Linear(16, 1));
  hvd::broadcast_parameters(*model, 0);
  const torch::Tensor start = model->parameters()[0].detach().flatten().clone();

  auto sgd = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  hvd::DistributedOptimizer opt(sgd, model->named_parameters());
  torch::manual_seed(rank);  // each rank its own data
  for (int step = 0; step < 5; ++step) {
    torch::Tensor x = torch::randn({4, 8});
    torch::Tensor y = x.sum(1, true) * 0.1 * (rank + 1);
    opt.zero_grad();
    torch::mse_loss(model->forward(x), y).backward();
    opt.step();
  }

  std::vector<torch::Tensor> flat;
  for (const auto& p : model->parameters()) flat.push_back(p.detach().flatten());
  const torch::Tensor mine = torch::cat(flat);
  const torch::Tensor all = hvd::allgather(mine.unsqueeze(0), "consumer.params");  // [size, n]
  bool same = true;
  for (int r = 1; r < hvd::size(); ++r) same = same && torch::equal(all[r], all[0]);
  const bool moved = !torch::equal(mine.slice(0, 0, start.numel()), start);
  std::printf("torch rank %d of %d: %zu parameters, same on every rank: %s, trained: %s\n", rank, hvd::size(),
              static_cast<size_t>(mine.numel()), same ? "yes" : "NO", moved ? "yes" : "NO");
  hvd::shutdown();
  return same && moved ? 0 : 1;
}
