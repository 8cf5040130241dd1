// The pipelined ring allreduce (float32 sum, in place; and fp16 on the wire)
// over the transport the job was started on: MPI under mpirun, Gloo TCP when
// started by a Gloo launcher (the contract's HOROVOD_* variables), so the two
// can be compared on the same sizes:
//
//   mpirun -np 2 <flags> build/bench/transport_bench 1,4,16,64 20
//   python3 tests/transport/run_gloo_workers.py -np 2 -- build/bench/transport_bench 1,4,16,64 20
//
// Prints per size (MiB): the median and best time over the iterations (each
// started together after a barrier, timed on rank 0) and the bus bandwidth.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "horovodlite/config.h"
#include "mpi/mpi_transport.h"
#include "ops/ring_allreduce.h"
#if HVL_HAVE_GLOO
#include "transport/gloo_transport.h"
#endif

namespace hvl = horovodlite;
namespace tp = horovodlite::transport;

namespace {

template <typename F>
std::pair<double, double> time_runs(tp::Context& ctx, int iterations, F fn) {
  std::vector<double> t;
  for (int i = 0; i < iterations + 2; ++i) {
    if (!ctx.barrier(tp::kDefaultTimeout).ok()) std::exit(2);
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= 2) t.push_back(s);  // two warm-up runs
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front()};
}

void run(const tp::ContextPtr& ctx, const hvl::Config& config, int argc, char** argv) {
  std::vector<double> sizes;
  std::stringstream list(argc > 1 ? argv[1] : "1,4,16,64");
  for (std::string item; std::getline(list, item, ',');) sizes.push_back(std::atof(item.c_str()));
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 10;
  hvl::RingAllreduceOptions options;
  options.segment_bytes = config.ring_segment_bytes;
  hvl::RingAllreduce ring(ctx, options);
  if (ctx->rank() == 0) {
    std::printf("transport=%s np=%d segment=%lld iterations=%d\n", ctx->kind(), ctx->size(),
                static_cast<long long>(options.segment_bytes), iterations);
  }
  for (double mib : sizes) {
    const int64_t count = static_cast<int64_t>(mib * (1 << 20) / 4);
    std::vector<float> buf(static_cast<size_t>(count), 1.0f);
    const auto plain = time_runs(*ctx, iterations, [&] {
      if (!ring.run(buf.data(), count, hvl::DataType::kFloat32, hvl::ReduceOp::kSum).ok()) std::exit(3);
    });
    std::fill(buf.begin(), buf.end(), 1.0f);
    const auto wire = time_runs(*ctx, iterations, [&] {
      if (!ring.run_fp16_wire(buf.data(), count, hvl::DataType::kFloat32, hvl::ReduceOp::kSum).ok()) std::exit(3);
    });
    if (ctx->rank() == 0) {
      const double bus = 2.0 * (ctx->size() - 1) / ctx->size() * static_cast<double>(count) * 4 / 1e9;
      std::printf(
          "%-5s %6.1f MiB  ring median %8.3f ms best %8.3f ms busbw %5.2f GB/s | fp16 wire median %8.3f ms "
          "best %8.3f ms\n",
          ctx->kind(), mib, plain.first * 1e3, plain.second * 1e3, bus / plain.first, wire.first * 1e3,
          wire.second * 1e3);
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  hvl::Config config;
  const hvl::Status cs = hvl::Config::from_env(&config);
  if (!cs.ok()) {
    std::fprintf(stderr, "transport_bench: %s\n", cs.message().c_str());
    return 1;
  }
  tp::ContextPtr ctx;
  const bool gloo = config.transport == hvl::Config::Transport::kGloo;
  if (gloo) {
#if HVL_HAVE_GLOO
    const hvl::Status s = tp::connect_gloo_from_config(config, &ctx);
    if (!s.ok()) {
      std::fprintf(stderr, "transport_bench: %s\n", s.message().c_str());
      return 1;
    }
#else
    std::fprintf(stderr, "transport_bench: built without Gloo\n");
    return 1;
#endif
  } else {
    MPI_Init(&argc, &argv);
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    std::shared_ptr<tp::MpiTransport> mpi;
    if (!tp::MpiTransport::create(comm, true, &mpi).ok()) return 1;
    ctx = mpi;
  }
  run(ctx, config, argc, argv);
  ctx.reset();
  if (!gloo) MPI_Finalize();
  return 0;
}
