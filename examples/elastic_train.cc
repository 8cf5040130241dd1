// Elastic data-parallel training with LibTorch (horovodlite::torch::elastic):
// the job survives lost workers and takes in new hosts. A small MLP learns a
// deterministic synthetic classification set; a TorchState holds the model,
// the optimizer (SGD with momentum, through the DistributedOptimizer) and the
// step; every step ends with state.commit().
//
//   python -m horovodlite.run --min-np 2 --max-np 3 --host-discovery-script ./discover.sh
//       build/examples/elastic_train --steps 200   (one command line)
//
// The model holds a buffer `committed_steps` to which every step adds
// allreduce(ones, Sum), i.e. the world size of that step: at the end it equals
// the sum of the sizes of the committed steps, whatever failed in between (no
// step lost, none counted twice). --out DIR writes rank 0's log of commits and
// each worker's final model summary there (the test reads them); --kill-host
// and --kill-at-step make the worker on that host kill itself with SIGKILL in
// the first generation (a lost worker, for tests and demonstrations).
#include <torch/torch.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cxxopts.hpp>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include "horovodlite/torch/basics.h"
#include "horovodlite/torch/broadcast.h"
#include "horovodlite/torch/collectives.h"
#include "horovodlite/torch/elastic.h"
#include "horovodlite/torch/optimizer.h"

namespace hvd = horovodlite::torch;

namespace {

constexpr int64_t kFeatures = 16;
constexpr int64_t kClasses = 4;
constexpr int64_t kSamples = 4096;

struct NetImpl : torch::nn::Module {
  NetImpl() {
    layers = register_module("layers", torch::nn::Sequential(torch::nn::Linear(kFeatures, 32), torch::nn::ReLU(),
                                                             torch::nn::Linear(32, kClasses)));
    committed_steps = register_buffer("committed_steps", torch::zeros({1}, torch::kFloat64));
  }
  torch::Tensor forward(torch::Tensor x) { return layers->forward(x); }
  torch::nn::Sequential layers{nullptr};
  torch::Tensor committed_steps;
};
TORCH_MODULE(Net);

const char* env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

double now_s() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("elastic_train", "Elastic data-parallel training with horovodlite::torch::elastic");
  // clang-format off
  options.add_options()
    ("steps", "training steps (each ends with a commit)", cxxopts::value<int64_t>()->default_value("200"))
    ("batch-size", "samples per rank and step", cxxopts::value<int64_t>()->default_value("32"))
    ("lr", "learning rate (SGD, momentum 0.9)", cxxopts::value<double>()->default_value("0.05"))
    ("sleep-ms", "pause after each step (to watch hosts come and go)", cxxopts::value<int>()->default_value("0"))
    ("out", "directory for rank 0's commit log and each worker's final model", cxxopts::value<std::string>())
    ("kill-host", "the worker on this HOROVOD_HOSTNAME kills itself ...", cxxopts::value<std::string>())
    ("kill-at-step", "... with SIGKILL at this step of the first generation", cxxopts::value<int64_t>()->default_value("-1"))
    ("h,help", "this help");
  // clang-format on
  cxxopts::ParseResult args;
  try {
    args = options.parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "elastic_train: " << e.what() << "\n" << options.help() << std::endl;
    return 2;
  }
  if (args.count("help")) {
    std::cout << options.help() << std::endl;
    return 0;
  }
  const int64_t steps = args["steps"].as<int64_t>();
  const int64_t batch = args["batch-size"].as<int64_t>();
  const int sleep_ms = args["sleep-ms"].as<int>();
  const std::string out = args.count("out") ? args["out"].as<std::string>() : "";
  const std::string kill_host = args.count("kill-host") ? args["kill-host"].as<std::string>() : "";
  const int64_t kill_at = args["kill-at-step"].as<int64_t>();
  const std::string host = env_or("HOROVOD_HOSTNAME", "localhost");

  torch::manual_seed(0);
  hvd::init();

  // The data: the same on every worker (a fixed generator).
  auto gen = at::detail::createCPUGenerator(1234);
  const torch::Tensor centers = at::randn({kClasses, kFeatures}, gen, at::kFloat);
  const torch::Tensor labels = at::randint(kClasses, {kSamples}, gen, at::kLong);
  const torch::Tensor inputs =
      centers.index_select(0, labels) + 0.8 * at::randn({kSamples, kFeatures}, gen, at::kFloat);

  Net model;
  auto sgd = std::make_shared<torch::optim::SGD>(model->parameters(),
                                                 torch::optim::SGDOptions(args["lr"].as<double>()).momentum(0.9));
  hvd::DistributedOptimizer optimizer(sgd, model->named_parameters());

  hvd::elastic::TorchState state(*model, optimizer, {{"step", 0}});
  state.register_reset_callbacks({[] {
    if (hvd::rank() == 0) std::printf("elastic_train: reset: %d worker(s) now\n", hvd::size());
  }});

  hvd::elastic::run(state, [&] {
    while (state["step"] < steps) {
      const int64_t step = state["step"];
      if (host == kill_host && step == kill_at && std::string(env_or("HOROVODLITE_ELASTIC_GENERATION", "")) == "1") {
        std::printf("elastic_train: %s kills itself at step %lld\n", host.c_str(), static_cast<long long>(step));
        std::fflush(stdout);
        std::raise(SIGKILL);
      }
      // This rank's slice of the step's global batch.
      const int64_t first = ((step * hvd::size() + hvd::rank()) * batch) % kSamples;
      const torch::Tensor idx = torch::arange(first, first + batch, torch::kLong).remainder(kSamples);
      optimizer.zero_grad();
      torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(inputs.index_select(0, idx)),
                                                                labels.index_select(0, idx));
      loss.backward();
      optimizer.step();
      {
        torch::NoGradGuard no_grad;
        hvd::AllreduceOptions sum;
        sum.op = horovodlite::ReduceOp::kSum;
        model->committed_steps.add_(hvd::allreduce(torch::ones({1}, torch::kFloat64), "elastic_train.count", sum));
      }
      state["step"] = step + 1;
      // Logged before the commit: commit() saves first, so a step logged here
      // is either committed or (failed before its save) redone and logged again.
      if (hvd::rank() == 0) {
        if (!out.empty()) {
          std::ofstream log(out + "/log", std::ios::app);
          log.precision(17);
          log << "{\"step\": " << step + 1 << ", \"size\": " << hvd::size() << ", \"t\": " << now_s()
              << ", \"loss\": " << loss.item<double>() << "}\n";
        }
        if ((step + 1) % 10 == 0 || step + 1 == steps) {
          std::printf("step %lld/%lld  size %d  loss %.4f\n", static_cast<long long>(step + 1),
                      static_cast<long long>(steps), hvd::size(), loss.item<double>());
          std::fflush(stdout);
        }
      }
      state.commit();
      if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    }
  });

  double checksum = 0;
  for (const auto& p : model->parameters()) checksum += p.sum().item<double>();
  const double committed = model->committed_steps.item<double>();
  std::printf("elastic_train: %s rank %d done: committed_steps %.1f, parameter checksum %.9g\n", host.c_str(),
              hvd::rank(), committed, checksum);
  if (!out.empty()) {
    std::ofstream final_file(out + "/final." + host);
    final_file.precision(17);
    final_file << "{\"step\": " << state.value("step") << ", \"committed_steps\": " << committed
               << ", \"checksum\": " << checksum << "}\n";
  }
  hvd::shutdown();
  return 0;
}
