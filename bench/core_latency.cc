// Core-to-core round trip: two threads, pinned to two CPUs, pass one cache line
// back and forth. Where the two CPUs share a last-level cache a round trip takes
// tens of nanoseconds; across chiplets or sockets several times that. A VM's
// host can move its vCPUs between the two placements while it runs, and a
// producer-consumer copy (a send slot that the peer's core reads) changes
// speed with it, so benchmark figures are labelled with it
// (docs/results/2026-11-adasum.md, "Near and far cores"):
//
//     build/bench/core_latency [--cpus 0,1] [--trips 200000]
//
// Prints "round trip N ns (near|far)"; the label is < 150 ns or not.
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cxxopts.hpp>
#include <string>
#include <thread>

namespace {

alignas(64) std::atomic<long> g_line{0};

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("core_latency", "core-to-core round trip of one cache line");
  options.add_options()("cpus", "the two CPUs", cxxopts::value<std::string>()->default_value("0,1"))(
      "trips", "round trips timed", cxxopts::value<long>()->default_value("200000"))("h,help", "help");
  const auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", options.help().c_str());
    return 0;
  }
  const std::string cpus = args["cpus"].as<std::string>();
  const size_t comma = cpus.find(',');
  if (comma == std::string::npos) {
    std::fprintf(stderr, "core_latency: --cpus takes two CPUs, as 0,1\n");
    return 2;
  }
  const int a = std::atoi(cpus.substr(0, comma).c_str()), b = std::atoi(cpus.substr(comma + 1).c_str());
  const long trips = args["trips"].as<long>();
  bool pinned = true;
  std::thread echo([&] {
    pinned = pin(b) && pinned;
    for (long i = 0; i < trips; ++i) {
      while (g_line.load(std::memory_order_acquire) != 2 * i + 1) {
      }
      g_line.store(2 * i + 2, std::memory_order_release);
    }
  });
  if (!pin(a)) pinned = false;
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < trips; ++i) {
    g_line.store(2 * i + 1, std::memory_order_release);
    while (g_line.load(std::memory_order_acquire) != 2 * i + 2) {
    }
  }
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
                    static_cast<double>(trips);
  echo.join();
  if (!pinned) {
    std::fprintf(stderr, "core_latency: could not pin to CPUs %d and %d\n", a, b);
    return 1;
  }
  std::printf("round trip %.0f ns (%s)\n", ns, ns < 150 ? "near" : "far");
  return 0;
}
