// checkpoint_memory: one forward + backward of a deep, narrow, large-batch MLP
// (activations dominate the weights), plainly or with checkpoint_sequential, and
// the peak resident memory it took. Run one mode per process, so each peak is
// measured from a fresh process:
//
//   checkpoint_memory --mode plain|checkpoint [--layers 64] [--width 32]
//                     [--batch 32768] [--segments sqrt(layers)] [--threads 1]
//
// Prints one line of key=value pairs, among them peak_delta_bytes: the peak
// resident set size (getrusage ru_maxrss) minus the resident size just before the
// forward (from /proc/self/statm). Large buffers are made to come from mmap so
// that freeing them returns the memory and the figures follow the live tensors.
#include <malloc.h>
#include <sys/resource.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

#include "horovodlite/torch/checkpoint.h"

namespace {

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int64_t width) : linear(register_module("linear", torch::nn::Linear(width, width))) {}
  at::Tensor forward(const at::Tensor& x) { return torch::relu(linear->forward(x)); }
  torch::nn::Linear linear;
};
TORCH_MODULE(Block);

int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size_pages = 0, resident_pages = 0;
  statm >> size_pages >> resident_pages;
  return resident_pages * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

int64_t peak_resident_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // kilobytes on Linux
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s --mode plain|checkpoint [--layers N] [--width N] [--batch N] "
               "[--segments N] [--threads N]\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode;
  int64_t layers = 64, width = 32, batch = 32768, segments = 0, threads = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) return usage(argv[0]);
    const char* value = argv[++i];
    if (arg == "--mode")
      mode = value;
    else if (arg == "--layers")
      layers = std::atoll(value);
    else if (arg == "--width")
      width = std::atoll(value);
    else if (arg == "--batch")
      batch = std::atoll(value);
    else if (arg == "--segments")
      segments = std::atoll(value);
    else if (arg == "--threads")
      threads = std::atoll(value);
    else
      return usage(argv[0]);
  }
  if ((mode != "plain" && mode != "checkpoint") || layers < 1 || width < 1 || batch < 1 || threads < 1) {
    return usage(argv[0]);
  }
  if (segments <= 0) {
    segments = std::max<int64_t>(1, static_cast<int64_t>(std::lround(std::sqrt(double(layers)))));
  }

  // Every buffer above 64 KiB gets its own mapping, returned to the system on free.
  mallopt(M_MMAP_THRESHOLD, 64 * 1024);
  mallopt(M_TRIM_THRESHOLD, 64 * 1024);
  torch::set_num_threads(static_cast<int>(threads));
  torch::manual_seed(0);

  torch::nn::Sequential model;
  for (int64_t i = 0; i < layers; ++i) {
    model->push_back(Block(width));
  }
  auto run = [&](const at::Tensor& x) {
    at::Tensor out = mode == "plain" ? model->forward(x)
                                     : horovodlite::torch::checkpoint_sequential(model, static_cast<int>(segments), x);
    at::Tensor loss = out.pow(2).mean();
    loss.backward();
    return loss.item<double>();
  };

  // Warm up the kernels and thread pools on a tiny batch, so that lazily made
  // buffers are in the baseline, not in the peak.
  run(torch::randn({8, width}));
  model->zero_grad();

  const at::Tensor input = torch::randn({batch, width});
  const int64_t baseline = resident_bytes();
  const auto start = std::chrono::steady_clock::now();
  const double loss = run(input);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t peak = peak_resident_bytes();

  double grad_norm = 0;
  for (const auto& p : model->parameters()) {
    grad_norm += p.grad().pow(2).sum().item<double>();
  }
  const int64_t activation_bytes = batch * width * static_cast<int64_t>(sizeof(float));
  std::printf(
      "mode=%s layers=%lld width=%lld batch=%lld segments=%lld threads=%lld "
      "activation_bytes_per_layer=%lld baseline_bytes=%lld peak_bytes=%lld "
      "peak_delta_bytes=%lld seconds=%.3f loss=%.9g grad_norm=%.9g\n",
      mode.c_str(), static_cast<long long>(layers), static_cast<long long>(width), static_cast<long long>(batch),
      static_cast<long long>(mode == "plain" ? 0 : segments), static_cast<long long>(threads),
      static_cast<long long>(activation_bytes), static_cast<long long>(baseline), static_cast<long long>(peak),
      static_cast<long long>(peak - baseline), seconds, loss, std::sqrt(grad_norm));
  return 0;
}
