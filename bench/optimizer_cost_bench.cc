// The optimizer's own costs through the LibTorch adapter (issue 19), the C++
// side of bench/optimizer_cost_bench.py:
//
//   --mode tensors   per round, `--tensors` float32 tensors of `--tensor-bytes`
//                    each started with horovodlite::torch::allreduce_async_(t,
//                    name) (what DistributedOptimizer's hooks do), then
//                    synchronized one by one; beside it one MPI_Allreduce of all
//                    the bytes at once. Reports ms per round and us per tensor
//                    (median over rounds of the slowest rank), and the
//                    background loop's cycles and fused batches per round.
//   --mode memory    a `--params`-parameter MLP (4 square Linear layers), SGD
//                    with momentum, `--steps` steps through the C++
//                    DistributedOptimizer (--fp16: fp16 compression; --adasum:
//                    op Adasum, the local step first); or, with
//                    --single, the plain optimizer in one process. Reports rank
//                    0's peak RSS and minor page faults per step (median after
//                    the first step), and whether the ranks' parameters agree.
//
//   mpirun -np 2 build/bench/optimizer_cost_bench --mode tensors --rounds 30
//   mpirun -np 2 build/bench/optimizer_cost_bench --mode memory [--fp16] [--adasum]
//   build/bench/optimizer_cost_bench --mode memory --single
#include <mpi.h>
#include <sys/resource.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "horovodlite/horovodlite.h"
#include "horovodlite/torch.h"

namespace hvd = horovodlite::torch;

namespace {

struct Flags {
  std::string mode = "tensors";
  int rounds = 30;
  int tensors = 200;
  int64_t tensor_bytes = 4096;
  int64_t params = 25000000;
  int steps = 5;
  int64_t batch = 32;
  bool fp16 = false;
  bool adasum = false;
  bool single = false;
};

[[noreturn]] void usage(const char* msg) {
  std::fprintf(stderr, "optimizer_cost_bench: %s\n", msg);
  std::exit(2);
}

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    if (a == "--mode") {
      f.mode = value();
    } else if (a == "--rounds") {
      f.rounds = std::stoi(value());
    } else if (a == "--tensors") {
      f.tensors = std::stoi(value());
    } else if (a == "--tensor-bytes") {
      f.tensor_bytes = std::stoll(value());
    } else if (a == "--params") {
      f.params = std::stoll(value());
    } else if (a == "--steps") {
      f.steps = std::stoi(value());
    } else if (a == "--batch") {
      f.batch = std::stoll(value());
    } else if (a == "--fp16") {
      f.fp16 = true;
    } else if (a == "--adasum") {
      f.adasum = true;
    } else if (a == "--single") {
      f.single = true;
    } else {
      usage(("unknown argument " + a).c_str());
    }
  }
  if (f.mode != "tensors" && f.mode != "memory") usage("--mode must be tensors or memory");
  if (f.rounds < 1 || f.tensors < 1 || f.tensor_bytes < 4 || f.steps < 2 || f.params < 16) usage("bad sizes");
  return f;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double slowest(double t) {
  double out = t;
  MPI_Allreduce(MPI_IN_PLACE, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

int run_tensors(const Flags& f) {
  hvd::init();
  const int rank = hvd::rank(), size = hvd::size();
  const int64_t count = f.tensor_bytes / 4;
  std::vector<at::Tensor> tensors;
  std::vector<std::string> names;
  for (int i = 0; i < f.tensors; ++i) {
    tensors.push_back(torch::ones({count}));
    names.push_back("cost." + std::to_string(i));
  }
  at::Tensor flat = torch::ones({count * f.tensors});
  at::Tensor flat_out = torch::empty_like(flat);
  std::vector<hvd::AsyncHandle> handles(tensors.size());
  auto hvl_round = [&] {
    for (size_t i = 0; i < tensors.size(); ++i) handles[i] = hvd::allreduce_async_(tensors[i], names[i], {});
    for (auto& h : handles) h.synchronize();
  };
  auto mpi_round = [&] {
    MPI_Allreduce(flat.data_ptr<float>(), flat_out.data_ptr<float>(), static_cast<int>(flat.numel()), MPI_FLOAT,
                  MPI_SUM, MPI_COMM_WORLD);
  };
  for (int i = 0; i < 3; ++i) {  // warm up: the response cache, MPI's connections
    hvl_round();
    mpi_round();
  }
  std::vector<double> hvl, mpi, cycles, batches;
  for (int r = 0; r < f.rounds; ++r) {
    for (auto& t : tensors) t.fill_(1.0);  // keep values finite (Average of ones stays one)
    MPI_Barrier(MPI_COMM_WORLD);
    const horovodlite::Stats s0 = horovodlite::stats();
    auto t0 = std::chrono::steady_clock::now();
    hvl_round();
    hvl.push_back(slowest(seconds_since(t0)));
    const horovodlite::Stats s1 = horovodlite::stats();
    cycles.push_back(static_cast<double>(s1.cycles - s0.cycles));
    batches.push_back(static_cast<double>(s1.responses_executed - s0.responses_executed));
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = std::chrono::steady_clock::now();
    mpi_round();
    mpi.push_back(slowest(seconds_since(t0)));
  }
  // The last round's results: the average of ones is one everywhere.
  bool ok = true;
  for (auto& t : tensors) ok = ok && torch::equal(t, torch::ones({count}));
  if (rank == 0) {
    const double h = median(hvl), m = median(mpi);
    std::printf("C++ per-tensor, np=%d, %d tensors of %lld B per round (median of %d rounds):\n", size, f.tensors,
                static_cast<long long>(f.tensor_bytes), f.rounds);
    std::printf(
        "  hvl (allreduce_async_)  %7.3f ms/round  %6.2f us/tensor  (rounds %.3f-%.3f ms; cycles/round %.0f, "
        "collectives/round %.0f)\n",
        h * 1e3, h * 1e6 / f.tensors, *std::min_element(hvl.begin(), hvl.end()) * 1e3,
        *std::max_element(hvl.begin(), hvl.end()) * 1e3, median(cycles), median(batches));
    std::printf("  mpi_one_call            %7.3f ms/round  %6.2f us/tensor\n", m * 1e3, m * 1e6 / f.tensors);
    std::printf("  results correct: %s\n", ok ? "yes" : "NO");
  }
  hvd::shutdown();
  return ok ? 0 : 1;
}

struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(int64_t width) {
    for (int i = 0; i < 4; ++i)
      layers.push_back(register_module("fc" + std::to_string(i), torch::nn::Linear(width, width)));
  }
  at::Tensor forward(at::Tensor x) {
    for (size_t i = 0; i < layers.size(); ++i) {
      x = layers[i]->forward(x);
      if (i + 1 < layers.size()) x = torch::relu(x);
    }
    return x;
  }
  std::vector<torch::nn::Linear> layers;
};
TORCH_MODULE(Mlp);

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

int run_memory(const Flags& f) {
  torch::set_num_threads(1);
  torch::manual_seed(1234);
  const auto width = static_cast<int64_t>(std::sqrt(static_cast<double>(f.params) / 4.0));
  Mlp model(width);
  int rank = 0, size = 1;
  if (!f.single) {
    hvd::init();
    rank = hvd::rank();
    size = hvd::size();
  }
  auto sgd = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  std::unique_ptr<hvd::DistributedOptimizer> opt;
  if (!f.single) {
    hvd::DistributedOptimizerOptions options;
    options.compression = f.fp16 ? hvd::Compression::kFp16 : hvd::Compression::kNone;
    if (f.adasum) options.op = horovodlite::ReduceOp::kAdasum;
    opt = std::make_unique<hvd::DistributedOptimizer>(sgd, model->named_parameters(), options);
    hvd::broadcast_parameters(model->named_parameters(), 0);
  }
  torch::manual_seed(100 + rank);
  const at::Tensor x = torch::randn({f.batch, width});
  const at::Tensor y = torch::randn({f.batch, width});
  std::vector<double> faults, times;
  for (int s = 0; s < f.steps; ++s) {
    const long f0 = minor_faults();
    const auto t0 = std::chrono::steady_clock::now();
    if (opt) {
      opt->zero_grad();
    } else {
      sgd->zero_grad();
    }
    at::Tensor loss = (model->forward(x) - y).pow(2).mean();
    loss.backward();
    if (opt) {
      opt->step();
    } else {
      sgd->step();
    }
    times.push_back(seconds_since(t0));
    faults.push_back(static_cast<double>(minor_faults() - f0));
  }
  const double peak = peak_rss_mib();
  bool agree = true;
  if (!f.single) {
    std::vector<at::Tensor> flat;
    for (const auto& p : model->parameters()) flat.push_back(p.detach().reshape({-1}));
    at::Tensor all = torch::cat(flat);
    agree = torch::equal(hvd::broadcast(all, 0, "check.params"), all);
  }
  bool grads_own = true;  // p.grad is an ordinary tensor of the parameter's shape
  for (const auto& p : model->parameters())
    grads_own = grads_own && p.grad().defined() && p.grad().sizes() == p.sizes();
  if (rank == 0) {
    std::vector<double> later(faults.begin() + 1, faults.end());
    std::vector<double> later_t(times.begin() + 1, times.end());
    int64_t n = 0;
    for (const auto& p : model->parameters()) n += p.numel();
    std::printf("C++ gradient memory: %lld-parameter MLP, SGD momentum, %d steps, rank 0:\n", static_cast<long long>(n),
                f.steps);
    const std::string label =
        f.single ? "single" : std::string(f.adasum ? "hvd_adasum" : "hvd") + (f.fp16 ? "_fp16" : "");
    std::printf("  %-16s np=%d  peak RSS %7.1f MiB  page faults/step %7.0f  step %8.1f ms  ranks agree %s  grads %s\n",
                label.c_str(), size, peak, median(later), median(later_t) * 1e3, agree ? "True" : "False",
                grads_own ? "ok" : "MISSING");
  }
  if (!f.single) hvd::shutdown();
  return agree && grads_own ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = parse(argc, argv);
  return f.mode == "tensors" ? run_tensors(f) : run_memory(f);
}
