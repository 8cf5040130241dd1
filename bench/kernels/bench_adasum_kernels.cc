// Adasum's float32 kernels (ops/adasum_kernels.h) as the op runs them on one
// rank's piece, with the caches flushed before each repetition:
//   dots, from memory:    the piece from memory against a 256 KiB segment in
//                         cache (the partner's, just copied in), segment by segment;
//   dots, in cache:       both 256 KiB, as many times as the piece has segments
//                         (the arithmetic alone);
//   combine, from memory: two pieces from memory, in place into the second,
//                         segments last to first (as the op walks them back).
// Usage: bench_adasum_kernels [MiB per piece, default 32] [repetitions, default 10]
// Prints ms per piece: median and best. A/B against another build's kernels:
// LD_LIBRARY_PATH=<dir with its libhorovodlite.so.0> bench_adasum_kernels.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "host_memory.h"
#include "mpi/adasum.h"
#include "ops/adasum_kernels.h"

namespace ak = horovodlite::adasum_kernels;
using horovodlite::HostBuffer;

namespace {

const int64_t kSegment = horovodlite::Adasum::local_segment_bytes() / 4;  // floats, as the op cuts them (one host)

void report(const char* name, int reps, const std::function<void()>& flush, const std::function<void()>& fn) {
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    flush();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  std::printf("  %-22s median %6.2f ms  best %6.2f ms\n", name, ms[ms.size() / 2], ms.front());
}

float* floats(HostBuffer& b) { return reinterpret_cast<float*>(b.data()); }

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 32;
  const int reps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 10;
  const int64_t n = static_cast<int64_t>(mib << 20) / 4 / kSegment * kSegment;
  if (n == 0) {
    std::fprintf(stderr, "bench_adasum_kernels: the piece must be at least 1 MiB\n");
    return 2;
  }
  // Several times a last-level cache: where a CPU lists a larger one, one core
  // still reads this much at memory speed (docs/results/2026-11-adasum.md).
  const size_t flush_bytes = size_t{256} << 20;
  HostBuffer x(n * 4), y(n * 4), seg(kSegment * 4), flush(flush_bytes);
  if (!x.data() || !y.data() || !seg.data() || !flush.data()) {
    std::fprintf(stderr, "bench_adasum_kernels: out of memory\n");
    return 1;
  }
  for (int64_t i = 0; i < n; ++i) {
    floats(x)[i] = static_cast<float>(i % 1000) * 1e-3f;
    floats(y)[i] = 1.0f / static_cast<float>(i % 997 + 1);
  }
  for (int64_t i = 0; i < kSegment; ++i) floats(seg)[i] = static_cast<float>(i % 89) - 44.0f;
  std::memset(flush.data(), 1, flush_bytes);
  auto flush_caches = [&] {  // writes every line: the pieces' lines are evicted
    for (size_t i = 0; i < flush_bytes; i += 64) flush.data()[i] = static_cast<char>(flush.data()[i] + 1);
  };
  auto nothing = [] {};
  ak::Scalar acc[3] = {0, 0, 0};
  std::printf("Adasum float32 kernels, a piece of %lld MiB in %lld segments, %d repetitions\n",
              static_cast<long long>(n * 4 >> 20), static_cast<long long>(n / kSegment), reps);
  report("dots, from memory", reps, flush_caches, [&] {
    for (int64_t s = 0; s < n; s += kSegment) ak::dots_f32(floats(x) + s, floats(seg), kSegment, acc);
  });
  ak::dots_f32(floats(seg), floats(seg), kSegment, acc);  // both segments in cache
  report("dots, in cache", reps, nothing, [&] {
    for (int64_t s = 0; s < n; s += kSegment) ak::dots_f32(floats(seg), floats(seg), kSegment, acc);
  });
  report("combine, from memory", reps, flush_caches, [&] {
    for (int64_t s = n - kSegment; s >= 0; s -= kSegment)
      ak::combine_f32(floats(y) + s, floats(x) + s, floats(y) + s, kSegment, 0.75L, 0.75L, false);
  });
  return 0;
}
