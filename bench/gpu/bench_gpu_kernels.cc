// Bandwidth of the device fusion-buffer kernels against the device's own copy
// rate, measured in the same run: cudaMemcpyAsync device-to-device of the same
// bytes is the reference (about 4.3 TB/s of read+write on an H200). Reports, per
// case, GB/s of bytes read + written and the fraction of the reference.
//
//   bench_gpu_kernels [--bytes 268435456] [--tensors 1,8,64,512] [--iters 50] [--csv out.csv]
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cxxopts.hpp>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "cuda/kernels.h"

using horovodlite::DataType;
namespace hc = horovodlite::cuda;

namespace {

#define CHECK(call)                                                                                        \
  do {                                                                                                     \
    cudaError_t rc_ = (call);                                                                              \
    if (rc_ != cudaSuccess) {                                                                              \
      std::fprintf(stderr, "%s failed: %s (%s:%d)\n", #call, cudaGetErrorString(rc_), __FILE__, __LINE__); \
      std::exit(1);                                                                                        \
    }                                                                                                      \
  } while (0)

// Median-free simple timing: `iters` launches between two events, after a warm-up.
double time_ms(const std::function<void()>& fn, int iters, cudaStream_t s) {
  for (int i = 0; i < 3; ++i) fn();
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  CHECK(cudaEventRecord(a, s));
  for (int i = 0; i < iters; ++i) fn();
  CHECK(cudaEventRecord(b, s));
  CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / iters;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("bench_gpu_kernels", "device fusion-buffer kernels vs cudaMemcpy D2D bandwidth");
  opts.add_options()("bytes", "float32 bytes per case (split across the tensors)",
                     cxxopts::value<int64_t>()->default_value("268435456"))(
      "tensors", "tensor counts to try", cxxopts::value<std::vector<int>>()->default_value("1,8,64,512"))(
      "iters", "timed iterations", cxxopts::value<int>()->default_value("50"))(
      "csv", "also write results here", cxxopts::value<std::string>()->default_value(""))("h,help", "help");
  auto args = opts.parse(argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", opts.help().c_str());
    return 0;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  const int64_t bytes = args["bytes"].as<int64_t>();
  const int iters = args["iters"].as<int>();
  const int64_t count = bytes / 4;
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void *src, *dst, *half;
  CHECK(cudaMalloc(&src, bytes + 4096 * 4));
  CHECK(cudaMalloc(&dst, bytes + 4096 * 4));
  CHECK(cudaMalloc(&half, bytes / 2 + 4096 * 2));
  CHECK(cudaMemset(src, 0, bytes));

  // The reference: one cudaMemcpyAsync D2D of the same bytes (read + write).
  const double ref_ms =
      time_ms([&] { CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s)); }, iters, s);
  const double ref_gbs = 2.0 * bytes / (ref_ms * 1e6);
  std::printf("device %s: cudaMemcpy D2D %.1f GB/s (read+write) for %lld bytes\n", prop.name, ref_gbs,
              static_cast<long long>(bytes));
  std::printf("%-28s %8s %10s %10s %9s\n", "case", "tensors", "time_us", "GB/s", "of_memcpy");
  std::ofstream csv;
  if (!args["csv"].as<std::string>().empty()) {
    csv.open(args["csv"].as<std::string>());
    csv << "case,tensors,bytes,time_us,gbs,fraction_of_memcpy,memcpy_gbs\n";
  }

  for (int n : args["tensors"].as<std::vector<int>>()) {
    // n tensors of (nearly) equal size, packed as the executor packs them.
    std::vector<hc::CopyTask> in, out, to_half, from_half;
    const int64_t per = count / n;
    for (int i = 0; i < n; ++i) {
      const int64_t off = i * per;
      in.push_back({static_cast<float*>(dst) + off, static_cast<float*>(src) + off, per});
      out.push_back({static_cast<float*>(src) + off, static_cast<float*>(dst) + off, per});
      to_half.push_back({static_cast<uint16_t*>(half) + off, static_cast<float*>(src) + off, per});
      from_half.push_back({static_cast<float*>(dst) + off, static_cast<uint16_t*>(half) + off, per});
    }
    const double moved = 2.0 * per * n * 4;           // float -> float
    const double moved_half = per * n * (4.0 + 2.0);  // float <-> half
    struct Case {
      const char* name;
      double bytes;
      std::function<void()> run;
    };
    std::vector<Case> cases = {
        {"batched_copy (pack)", moved,
         [&] { CHECK(hc::batched_scale_copy(in.data(), n, DataType::kFloat32, 1.0, s)); }},
        {"batched_scale_copy x0.5", moved,
         [&] { CHECK(hc::batched_scale_copy(out.data(), n, DataType::kFloat32, 0.5, s)); }},
        {"to_half (fp16 compress)", moved_half,
         [&] { CHECK(hc::batched_to_half(to_half.data(), n, DataType::kFloat32, 1.0, s)); }},
        {"from_half x0.25", moved_half,
         [&] { CHECK(hc::batched_from_half(from_half.data(), n, DataType::kFloat32, 0.25, s)); }},
    };
    for (const Case& c : cases) {
      const double ms = time_ms(c.run, iters, s);
      const double gbs = c.bytes / (ms * 1e6);
      std::printf("%-28s %8d %10.1f %10.1f %8.1f%%\n", c.name, n, ms * 1e3, gbs, 100.0 * gbs / ref_gbs);
      if (csv)
        csv << c.name << "," << n << "," << c.bytes << "," << ms * 1e3 << "," << gbs << "," << gbs / ref_gbs << ","
            << ref_gbs << "\n";
    }
  }
  cudaFree(src);
  cudaFree(dst);
  cudaFree(half);
  cudaStreamDestroy(s);
  return 0;
}
