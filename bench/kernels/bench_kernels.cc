// Throughput of the host kernels against memcpy and against the scalar
// fallback. Usage: bench_kernels [MiB per buffer, default 64] [repetitions]
// GB/s counts the bytes of the destination buffer processed per second.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "kernels/reduce.h"
#include "kernels/reduce_impl.h"

namespace hk = horovodlite::kernels;
using horovodlite::DataType;
using horovodlite::ReduceOp;

namespace {

double best_seconds(int reps, const std::function<void()>& fn) {
  fn();  // warm up (page faults, caches)
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s < best) best = s;
  }
  return best;
}

void report(const char* name, size_t bytes, double seconds) {
  std::printf("  %-34s %8.2f GB/s\n", name, static_cast<double>(bytes) / seconds / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 64;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 10;
  const size_t bytes = mib << 20;
  std::vector<uint8_t> a(bytes), b(bytes, 0);
  for (size_t i = 0; i < bytes / 4; ++i) {
    const float f = static_cast<float>(i % 1000) * 1e-3f;
    std::memcpy(a.data() + 4 * i, &f, 4);
    std::memcpy(b.data() + 4 * i, &f, 4);
  }
  std::vector<uint16_t> ha(bytes / 2), hb(bytes / 2);
  for (size_t i = 0; i < ha.size(); ++i) ha[i] = hb[i] = hk::float_to_half(static_cast<float>(i % 1000) * 1e-3f);
  const int64_t nf = static_cast<int64_t>(bytes / 4), nh = static_cast<int64_t>(bytes / 2);
  std::printf("buffers of %zu MiB, best of %d, avx2+f16c=%d\n", mib, reps, hk::cpu_has_avx2_f16c() ? 1 : 0);
  std::vector<uint8_t> c(bytes);
  report("memcpy", bytes, best_seconds(reps, [&] { std::memcpy(c.data(), a.data(), bytes); }));
  report("reduce_into float32 sum", bytes,
         best_seconds(reps, [&] { hk::reduce_into(b.data(), a.data(), nf, DataType::kFloat32, ReduceOp::kSum); }));
  report("scalar float32 sum", bytes, best_seconds(reps, [&] {
           hk::detail::scalar_reduce_into(b.data(), a.data(), nf, DataType::kFloat32, ReduceOp::kSum);
         }));
  report("reduce_into float16 sum", bytes,
         best_seconds(reps, [&] { hk::reduce_into(hb.data(), ha.data(), nh, DataType::kFloat16, ReduceOp::kSum); }));
  report("scalar float16 sum", bytes, best_seconds(reps, [&] {
           hk::detail::scalar_reduce_into(hb.data(), ha.data(), nh, DataType::kFloat16, ReduceOp::kSum);
         }));
  report("reduce_into bfloat16 sum", bytes,
         best_seconds(reps, [&] { hk::reduce_into(hb.data(), ha.data(), nh, DataType::kBFloat16, ReduceOp::kSum); }));
  report("reduce_into int32 max", bytes,
         best_seconds(reps, [&] { hk::reduce_into(b.data(), a.data(), nf, DataType::kInt32, ReduceOp::kMax); }));
  report("scale_copy float32 x0.5", bytes,
         best_seconds(reps, [&] { hk::scale_copy(c.data(), a.data(), nf, DataType::kFloat32, 0.5); }));
  std::vector<float> fl(nh);
  report("half_to_float_n (half bytes)", bytes,
         best_seconds(reps, [&] { hk::half_to_float_n(fl.data(), ha.data(), nh); }));
  report("float_to_half_n (half bytes)", bytes,
         best_seconds(reps, [&] { hk::float_to_half_n(hb.data(), fl.data(), nh); }));
  return 0;
}
