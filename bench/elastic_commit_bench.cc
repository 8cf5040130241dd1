// Time of horovodlite::torch::elastic::TorchState::commit() for a model of
// --params parameters with SGD momentum (the target: <= 50 ms for 25M
// parameters); the C++ side of elastic_commit_bench.py.
//
//   mpirun -np 2 build/bench/elastic_commit_bench [params] [repeats]
//
// Prints the median and min over the repeats of commit() and of save() alone
// (the in-memory copy; commit adds check_host_updates' broadcast), and of
// restore().
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "horovodlite/torch/basics.h"
#include "horovodlite/torch/collectives.h"
#include "horovodlite/torch/elastic.h"

namespace hvd = horovodlite::torch;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void report(const char* what, std::vector<double> t) {
  std::sort(t.begin(), t.end());
  std::printf("%-8s median %7.1f ms  min %7.1f ms\n", what, 1e3 * t[t.size() / 2], 1e3 * t.front());
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t params = argc > 1 ? std::atoll(argv[1]) : 25000000;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 10;
  hvd::init();
  constexpr int64_t kWidth = 2500;
  const int64_t layers = std::max<int64_t>(1, (params + (kWidth * kWidth + kWidth) / 2) / (kWidth * kWidth + kWidth));
  torch::nn::Sequential model;
  for (int64_t i = 0; i < layers; ++i) model->push_back(torch::nn::Linear(kWidth, kWidth));
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  model->forward(torch::randn({2, kWidth})).sum().backward();
  opt.step();
  int64_t n = 0;
  for (const auto& p : model->parameters()) n += p.numel();
  hvd::elastic::TorchState state(*model, opt, {{"epoch", 0}});
  std::vector<double> commits, saves, restores;
  for (int i = 0; i < repeats; ++i) {
    hvd::barrier();
    auto t = std::chrono::steady_clock::now();
    state.commit();
    commits.push_back(seconds_since(t));
    t = std::chrono::steady_clock::now();
    state.save();
    saves.push_back(seconds_since(t));
    t = std::chrono::steady_clock::now();
    state.restore();
    restores.push_back(seconds_since(t));
  }
  if (hvd::rank() == 0) {
    std::printf("elastic_commit_bench: %lld parameters (SGD momentum), %d rank(s), %d repeats\n",
                static_cast<long long>(n), hvd::size(), repeats);
    report("commit", commits);
    report("save", saves);
    report("restore", restores);
  }
  hvd::shutdown();
  return 0;
}
