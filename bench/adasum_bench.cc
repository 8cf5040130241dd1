// Adasum against Sum: horovodlite allreduces of one float32 tensor (64 MiB by
// default) with op Adasum and with op Sum, in alternating rounds so that both
// see the same machine load; prints the median of each and the ratio
// (the target in issue 28: Adasum >= 0.8x the speed of Sum at np 2 and 4).
// --op sum or --op adasum times one op only (for pairing whole runs of each
// from outside, e.g. with /usr/bin/time). --huge-pages puts the input and
// output on transparent huge pages (the library's HostBuffer, advised
// MADV_HUGEPAGE, as PyTorch's THP_MEM_ALLOC_ENABLE=1 does for its tensors): the same-host transfers pin
// the sender's pages, and with 4 KiB pages that pinning costs about as much as
// the copy (docs/results/2026-11-performance.md, "Huge pages").
//
//   source ci/env.sh; mpirun -np 2 build/bench/adasum_bench [--bytes N] [--rounds R] [--op both|sum|adasum]
//   [--huge-pages]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cxxopts.hpp>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "horovodlite/horovodlite.h"
#include "host_memory.h"

namespace hvl = horovodlite;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// This process's memory on transparent huge pages, in KiB (smaps_rollup).
long huge_kib() {
  std::ifstream f("/proc/self/smaps_rollup");
  std::string key;
  long kib = 0;
  while (f >> key) {
    if (key == "AnonHugePages:" && (f >> kib)) return kib;
  }
  return -1;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("adasum_bench", "horovodlite Adasum allreduce vs Sum allreduce");
  opts.add_options()("bytes", "tensor size in bytes (float32)",
                     cxxopts::value<size_t>()->default_value(std::to_string(64u << 20)))(
      "rounds", "timed rounds of each op", cxxopts::value<int>()->default_value("10"))(
      "op", "both, sum or adasum", cxxopts::value<std::string>()->default_value("both"))(
      "huge-pages", "input and output on transparent huge pages (from 2 MiB up)")("h,help", "help");
  auto args = opts.parse(argc, argv);
  if (args.count("help")) {
    std::puts(opts.help().c_str());
    return 0;
  }
  const int64_t n = static_cast<int64_t>(args["bytes"].as<size_t>() / sizeof(float));
  const int rounds = std::max(1, args["rounds"].as<int>());
  const std::string which = args["op"].as<std::string>();
  if (which != "both" && which != "sum" && which != "adasum") {
    std::fprintf(stderr, "adasum_bench: --op must be both, sum or adasum, not '%s'\n", which.c_str());
    return 2;
  }
  const bool run_sum = which != "adasum", run_adasum = which != "sum";
  hvl::Status s = hvl::init();
  if (!s.ok()) {
    std::fprintf(stderr, "init failed: %s\n", s.to_string().c_str());
    return 1;
  }
  const int rank = hvl::rank(), size = hvl::size();
  // Ordinary pages: vectors; huge pages: the library's own HostBuffer
  // (host_memory.h), 2 MiB aligned and advised before first touch.
  const bool huge = args.count("huge-pages") > 0;
  std::vector<float> plain_in, plain_out;
  hvl::HostBuffer huge_in, huge_out;
  if (huge) {
    huge_in = hvl::HostBuffer(static_cast<size_t>(n) * sizeof(float));
    huge_out = hvl::HostBuffer(static_cast<size_t>(n) * sizeof(float));
    if (huge_in.data() == nullptr || huge_out.data() == nullptr) {
      std::fprintf(stderr, "adasum_bench: cannot map %lld bytes\n", static_cast<long long>(n) * 4);
      return 1;
    }
  } else {
    plain_in.resize(static_cast<size_t>(n));
    plain_out.resize(static_cast<size_t>(n));
  }
  float* input = huge ? reinterpret_cast<float*>(huge_in.data()) : plain_in.data();
  float* output = huge ? reinterpret_cast<float*>(huge_out.data()) : plain_out.data();
  std::mt19937 gen(rank + 1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) input[i] = dist(gen);

  // One op, out of place (the input stays the same from round to round); the
  // slowest rank's time.
  auto once = [&](hvl::ReduceOp op, const char* name) {
    hvl::TensorView in{input, hvl::DataType::kFloat32, {n}};
    hvl::TensorView out{output, hvl::DataType::kFloat32, {n}};
    hvl::AllreduceOptions o;
    o.op = op;
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = now();
    hvl::Status st = hvl::allreduce_async(name, in, out, o)->wait();
    double t = now() - t0;
    if (!st.ok()) {
      std::fprintf(stderr, "allreduce failed: %s\n", st.to_string().c_str());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return t;
  };
  // Warm-up: buffers, communicators, caches.
  if (run_sum) once(hvl::ReduceOp::kSum, "bench.sum");
  if (run_adasum) once(hvl::ReduceOp::kAdasum, "bench.adasum");
  std::vector<double> sum, adasum;
  for (int r = 0; r < rounds; ++r) {
    if (run_sum) sum.push_back(once(hvl::ReduceOp::kSum, "bench.sum"));
    if (run_adasum) adasum.push_back(once(hvl::ReduceOp::kAdasum, "bench.adasum"));
  }
  if (rank == 0) {
    const double mib = static_cast<double>(n) * sizeof(float) / (1 << 20);
    std::printf("# adasum_bench: np=%d, %.1f MiB float32, %d rounds of %s, median of the slowest rank\n", size, mib,
                rounds, run_sum && run_adasum ? "each (alternating)" : which.c_str());
    std::printf("# buffers on %s pages (rank 0: %ld KiB of its memory on huge pages)\n",
                huge ? "transparent huge" : "ordinary", huge_kib());
    if (run_sum)
      std::printf("sum    %9.2f ms  (min %.2f)\n", median(sum) * 1e3, *std::min_element(sum.begin(), sum.end()) * 1e3);
    if (run_adasum) {
      std::printf("adasum %9.2f ms  (min %.2f)\n", median(adasum) * 1e3,
                  *std::min_element(adasum.begin(), adasum.end()) * 1e3);
    }
    if (run_sum && run_adasum) std::printf("adasum speed / sum speed = %.2f\n", median(sum) / median(adasum));
  }
  const hvl::Status done = hvl::shutdown();
  if (!done.ok()) {
    std::fprintf(stderr, "adasum_bench: shutdown: %s\n", done.message().c_str());
    return 1;
  }
  return 0;
}
