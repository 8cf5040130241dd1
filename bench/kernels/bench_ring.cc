// RingAllreduce against MPI_Allreduce (in place, float32 sum), and the two
// fp16-compressed variants: the old three passes (whole buffer to fp16, ring on
// fp16, back to float32) and run_fp16_wire (fp16 only on the wire).
// Usage: mpirun -np N bench_ring [MiB=64] [iterations=10] [segment_bytes=0 (default)] [depth=0 (default)]
// Prints, on rank 0, the median and best time over iterations (each the
// slowest rank's), algbw = bytes / time and busbw = algbw * 2 (N - 1) / N.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <vector>

#include "kernels/reduce.h"
#include "mpi/mpi_transport.h"
#include "ops/ring_allreduce.h"

using horovodlite::DataType;
using horovodlite::ReduceOp;
using horovodlite::RingAllreduce;
using horovodlite::RingAllreduceOptions;

namespace {

struct Timing {
  double median;
  double best;
};

Timing time_runs(int iterations, MPI_Comm comm, const std::function<void()>& fn) {
  std::vector<double> times;
  for (int i = 0; i < iterations + 2; ++i) {  // two warm-up runs
    MPI_Barrier(comm);
    const double t0 = MPI_Wtime();
    fn();
    double t = MPI_Wtime() - t0, slowest = 0;
    MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
    if (i >= 2) times.push_back(slowest);
  }
  std::sort(times.begin(), times.end());
  return {times[times.size() / 2], times.front()};
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const double mib = argc > 1 ? std::atof(argv[1]) : 64;
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 10;
  RingAllreduceOptions options;
  if (argc > 3 && std::atoll(argv[3]) > 0) options.segment_bytes = std::atoll(argv[3]);
  if (argc > 4 && std::atoi(argv[4]) > 0) options.pipeline_depth = std::atoi(argv[4]);
  const int64_t count = static_cast<int64_t>(mib * (1 << 20) / 4);
  std::vector<float> buf(count, 1.0f);
  RingAllreduce ring(std::make_shared<horovodlite::transport::MpiTransport>(comm), options);

  const Timing t_mpi = time_runs(iterations, comm, [&] {
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm);
  });
  std::fill(buf.begin(), buf.end(), 1.0f);
  const Timing t_ring = time_runs(iterations, comm, [&] {
    const auto s = ring.run(buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
    if (!s.ok()) MPI_Abort(comm, 1);
  });
  std::vector<uint16_t> half(count);
  const Timing t_three_pass = time_runs(iterations, comm, [&] {
    horovodlite::kernels::float_to_half_n(half.data(), buf.data(), count);
    const auto s = ring.run(half.data(), count, DataType::kFloat16, ReduceOp::kSum);
    if (!s.ok()) MPI_Abort(comm, 1);
    horovodlite::kernels::half_to_float_n(buf.data(), half.data(), count);
  });
  std::fill(buf.begin(), buf.end(), 1.0f);
  const Timing t_wire = time_runs(iterations, comm, [&] {
    const auto s = ring.run_fp16_wire(buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
    if (!s.ok()) MPI_Abort(comm, 1);
  });
  if (rank == 0) {
    const double bytes = static_cast<double>(count) * 4;
    const double bus = 2.0 * (size - 1) / size;
    std::printf("np=%d %.1f MiB segment=%lld depth=%d\n", size, mib,
                static_cast<long long>(ring.options().segment_bytes), ring.options().pipeline_depth);
    auto line = [&](const char* name, const Timing& t) {
      std::printf("  %-14s median %8.3f ms  algbw %6.2f GB/s  busbw %6.2f GB/s | best %8.3f ms  busbw %6.2f GB/s\n",
                  name, t.median * 1e3, bytes / t.median / 1e9, bytes / t.median / 1e9 * bus, t.best * 1e3,
                  bytes / t.best / 1e9 * bus);
    };
    line("MPI_Allreduce", t_mpi);
    line("RingAllreduce", t_ring);
    line("fp16 3-pass", t_three_pass);
    line("fp16 wire", t_wire);
    std::printf("  ring / MPI busbw: median %.2fx, best %.2fx\n", t_mpi.median / t_ring.median,
                t_mpi.best / t_ring.best);
    std::printf("  fp16 wire speed-up over ring (float32): median %.2fx, best %.2fx; over 3-pass: median %.2fx\n",
                t_ring.median / t_wire.median, t_ring.best / t_wire.best, t_three_pass.median / t_wire.median);
  }
  MPI_Comm_free(&comm);
  MPI_Finalize();
  return 0;
}
