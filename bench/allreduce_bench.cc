// Allreduce benchmark: horovodlite against raw MPI_Allreduce on the same
// buffers in the same run. Raw MPI is timed first, before horovodlite starts its
// background thread, so that MPI has the machine to itself.
//
//   source ci/env.sh; mpirun -np 2 build/bench/allreduce_bench [--min-bytes N] [--max-bytes N]
//   [--iters-percent P] [--csv out.csv] [--no-resnet]
//
// (ci/env.sh gives a plain mpirun the launcher's flags, runner/mpi_flags.py, as
// OMPI_MCA_* variables.)
// Prints, per size: time, algbw = bytes/time, busbw = algbw * 2(n-1)/n (the
// nccl-tests definition) and the ratio to MPI; then the ResNet-50 gradient set
// (161 tensors, 25.6 M floats, enqueued in reverse as backward would) against one
// MPI_Allreduce of the same bytes, and the latency of one 4 KiB tensor.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cxxopts.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "horovodlite/horovodlite.h"

namespace hvl = horovodlite;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Runs fn `iters` times after `warmup` runs; returns the slowest rank's mean seconds per run.
template <typename F>
double timed(int warmup, int iters, F fn) {
  for (int i = 0; i < warmup; ++i) fn();
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = now();
  for (int i = 0; i < iters; ++i) fn();
  double t = (now() - t0) / iters;
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return t;
}

int iterations_for(size_t bytes, int scale) {
  const size_t mib = 1 << 20;
  int n = bytes <= 64 * 1024 ? 2000 : bytes <= mib ? 300 : bytes <= 16 * mib ? 30 : bytes <= 64 * mib ? 8 : 4;
  return std::max(2, n * scale / 100);
}

// The parameter shapes of torchvision's ResNet-50 in forward order (161 tensors).
std::vector<int64_t> resnet50_sizes() {
  std::vector<int64_t> s;
  auto conv = [&](int64_t out, int64_t in, int64_t k) { s.push_back(out * in * k * k); };
  auto bn = [&](int64_t c) {
    s.push_back(c);
    s.push_back(c);
  };
  conv(64, 3, 7);
  bn(64);
  int64_t in = 64;
  const int blocks[4] = {3, 4, 6, 3};
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t planes = 64 << stage;
    for (int b = 0; b < blocks[stage]; ++b) {
      conv(planes, in, 1);
      bn(planes);
      conv(planes, planes, 3);
      bn(planes);
      conv(planes * 4, planes, 1);
      bn(planes * 4);
      if (b == 0) {
        conv(planes * 4, in, 1);
        bn(planes * 4);
      }
      in = planes * 4;
    }
  }
  s.push_back(1000 * 2048);
  s.push_back(1000);
  return s;
}

struct Row {
  size_t bytes;
  double mpi = 0, hvl = 0, hvl_fp16 = 0;
};

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("allreduce_bench", "horovodlite allreduce vs MPI_Allreduce");
  opts.add_options()("min-bytes", "smallest message", cxxopts::value<size_t>()->default_value("4096"))(
      "max-bytes", "largest message", cxxopts::value<size_t>()->default_value(std::to_string(256u << 20)))(
      "iters-percent", "scale the iteration counts (100 = default)", cxxopts::value<int>()->default_value("100"))(
      "csv", "write the size sweep as CSV to this file", cxxopts::value<std::string>()->default_value(""))(
      "no-resnet", "skip the ResNet-50 case")("h,help", "help");
  auto args = opts.parse(argc, argv);
  if (args.count("help")) {
    std::puts(opts.help().c_str());
    return 0;
  }
  const int scale = args["iters-percent"].as<int>();

  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  std::vector<Row> rows;
  for (size_t b = args["min-bytes"].as<size_t>(); b <= args["max-bytes"].as<size_t>(); b *= 4) rows.push_back({b});
  const size_t max_bytes = rows.empty() ? 4096 : rows.back().bytes;
  std::vector<float> buf(max_bytes / sizeof(float), 1.0f);
  const std::vector<int64_t> resnet = resnet50_sizes();
  int64_t resnet_total = 0;
  for (int64_t n : resnet) resnet_total += n;
  std::vector<float> resnet_buf(resnet_total, 1.0f);
  const bool do_resnet = !args.count("no-resnet");

  // ---- raw MPI, alone on the machine ----
  for (Row& r : rows) {
    const int n = static_cast<int>(r.bytes / sizeof(float));
    r.mpi = timed(2, iterations_for(r.bytes, scale),
                  [&] { MPI_Allreduce(MPI_IN_PLACE, buf.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); });
  }
  double resnet_mpi = 0;
  if (do_resnet) {
    resnet_mpi = timed(1, std::max(2, 5 * scale / 100), [&] {
      MPI_Allreduce(MPI_IN_PLACE, resnet_buf.data(), static_cast<int>(resnet_total), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
    });
  }
  float lat = 1.0f;
  std::vector<float> small(1024, 1.0f);
  const int lat_iters = std::max(100, 3000 * scale / 100);
  const double lat_mpi = timed(
      50, lat_iters, [&] { MPI_Allreduce(MPI_IN_PLACE, small.data(), 1024, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); });
  (void)lat;

  // ---- horovodlite ----
  hvl::Status s = hvl::init();
  if (!s.ok()) {
    std::fprintf(stderr, "init failed: %s\n", s.to_string().c_str());
    return 1;
  }
  auto run_hvl = [&](const std::string& name, float* data, int64_t n, hvl::Compression c) {
    hvl::TensorView t{data, hvl::DataType::kFloat32, {n}};
    hvl::AllreduceOptions o;
    o.op = hvl::ReduceOp::kSum;
    o.compression = c;
    hvl::Status st = hvl::allreduce_async(name, t, t, o)->wait();
    if (!st.ok()) {
      std::fprintf(stderr, "allreduce failed: %s\n", st.to_string().c_str());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  };
  for (Row& r : rows) {
    const int64_t n = static_cast<int64_t>(r.bytes / sizeof(float));
    const int it = iterations_for(r.bytes, scale);
    r.hvl = timed(2, it, [&] { run_hvl("sweep", buf.data(), n, hvl::Compression::kNone); });
    r.hvl_fp16 = timed(2, it, [&] { run_hvl("sweep.fp16", buf.data(), n, hvl::Compression::kFp16); });
    std::fill(buf.begin(), buf.end(), 1.0f);  // keep values small for the fp16 runs
  }
  double resnet_hvl = 0, resnet_hvl_fp16 = 0;
  if (do_resnet) {
    auto step = [&](hvl::Compression c) {
      std::vector<hvl::HandlePtr> hs;
      hs.reserve(resnet.size());
      int64_t off = resnet_total;
      for (size_t i = resnet.size(); i-- > 0;) {  // backward order: last layer first
        off -= resnet[i];
        hvl::TensorView t{resnet_buf.data() + off, hvl::DataType::kFloat32, {resnet[i]}};
        hvl::AllreduceOptions o;
        o.op = hvl::ReduceOp::kAverage;
        o.compression = c;
        hs.push_back(hvl::allreduce_async("resnet50." + std::to_string(i), t, t, o));
      }
      for (auto& h : hs) {
        const hvl::Status st = h->wait();
        if (!st.ok()) {
          std::fprintf(stderr, "allreduce failed: %s\n", st.to_string().c_str());
          MPI_Abort(MPI_COMM_WORLD, 1);
        }
      }
    };
    resnet_hvl = timed(1, std::max(2, 5 * scale / 100), [&] { step(hvl::Compression::kNone); });
    resnet_hvl_fp16 = timed(1, std::max(2, 5 * scale / 100), [&] { step(hvl::Compression::kFp16); });
  }
  const hvl::Stats before = hvl::stats();
  const double lat_hvl = timed(50, lat_iters, [&] { run_hvl("latency", small.data(), 1024, hvl::Compression::kNone); });
  const hvl::Stats after = hvl::stats();
  // What the latency loop took on this rank: cycles per op, and how many ops went eagerly (one round).
  const double lat_ops = lat_iters + 50;
  const double lat_cycles = static_cast<double>(after.cycles - before.cycles) / lat_ops;
  const double lat_eager = static_cast<double>(after.eager_allreduces - before.eager_allreduces) / lat_ops;

  if (rank == 0) {
    const double bus = size > 1 ? 2.0 * (size - 1) / size : 1.0;
    std::printf("# allreduce_bench: np=%d, float32 sum; times are the slowest rank's mean\n", size);
    std::printf("%12s %12s %10s %12s %10s %8s %12s %10s %9s\n", "bytes", "mpi_us", "mpi_busbw", "hvl_us", "hvl_busbw",
                "hvl/mpi", "fp16_us", "fp16_busbw", "fp16_gain");
    for (const Row& r : rows) {
      auto bw = [&](double t) { return r.bytes / t / 1e9 * bus; };
      std::printf("%12zu %12.1f %10.3f %12.1f %10.3f %8.2f %12.1f %10.3f %9.2f\n", r.bytes, r.mpi * 1e6, bw(r.mpi),
                  r.hvl * 1e6, bw(r.hvl), bw(r.hvl) / bw(r.mpi), r.hvl_fp16 * 1e6, bw(r.hvl_fp16), r.hvl / r.hvl_fp16);
    }
    std::printf("# busbw in GB/s; hvl/mpi = busbw ratio (>1: horovodlite faster); fp16_gain = hvl_us / fp16_us\n");
    if (do_resnet) {
      std::printf(
          "resnet50: %zu tensors, %.1f MB: one MPI_Allreduce %.2f ms; horovodlite step %.2f ms (%.2fx of MPI); "
          "fp16 step %.2f ms\n",
          resnet.size(), resnet_total * 4 / 1e6, resnet_mpi * 1e3, resnet_hvl * 1e3, resnet_hvl / resnet_mpi,
          resnet_hvl_fp16 * 1e3);
    }
    std::printf(
        "latency 4 KiB: MPI_Allreduce %.1f us; horovodlite %.1f us (+%.1f us); rank 0: %.2f cycles per op, "
        "%.0f %% eager\n",
        lat_mpi * 1e6, lat_hvl * 1e6, (lat_hvl - lat_mpi) * 1e6, lat_cycles, 100 * lat_eager);
    const std::string csv = args["csv"].as<std::string>();
    if (!csv.empty()) {
      std::ofstream f(csv);
      f << "bytes,np,mpi_s,hvl_s,hvl_fp16_s,mpi_busbw_gbs,hvl_busbw_gbs,hvl_fp16_busbw_gbs\n";
      for (const Row& r : rows) {
        f << r.bytes << ',' << size << ',' << r.mpi << ',' << r.hvl << ',' << r.hvl_fp16 << ','
          << r.bytes / r.mpi / 1e9 * bus << ',' << r.bytes / r.hvl / 1e9 * bus << ','
          << r.bytes / r.hvl_fp16 / 1e9 * bus << '\n';
      }
      std::printf("wrote %s\n", csv.c_str());
    }
  }
  const hvl::Status down = hvl::shutdown();
  if (!down.ok()) std::fprintf(stderr, "shutdown: %s\n", down.to_string().c_str());
  MPI_Finalize();
  return down.ok() ? 0 : 1;
}
