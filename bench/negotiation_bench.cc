// The negotiation's allreduce on its own: a vector of 64-bit words ANDed on
// every rank, back to back, by
//   - MPI_Allreduce (blocking: the reference),
//   - MPI_Iallreduce completed with horovodlite's mpi_wait (what the background
//     thread used before RecursiveDoubling),
//   - RecursiveDoubling on the host-ordered communicator (what it uses now).
//
//   mpirun -np 4 build/bench/negotiation_bench [--words 35] [--iters 2000]
//   tests/multihost/run_on_hosts.sh 4 1 2gbit -- build/bench/negotiation_bench
//
// Prints rank 0's mean time per call of each method (the second of two rounds).
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "mpi/mpi_world.h"
#include "negotiation/recursive_doubling.h"
#include "world.h"

namespace hvl = horovodlite;

int main(int argc, char** argv) {
  size_t words = 35;  // the bit vector of the default cache capacity (1024) on up to 64 ranks
  int iters = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--words") == 0) words = std::strtoull(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--iters") == 0) iters = std::atoi(argv[i + 1]);
  }
  hvl::World mpi;
  hvl::Status s = mpi.init_mpi(nullptr);
  if (!s.ok()) {
    std::fprintf(stderr, "init: %s\n", s.message().c_str());
    return 1;
  }
  hvl::RecursiveDoubling rd(mpi.host_wire(), mpi.eager_message_bytes());
  std::vector<uint64_t> v(words, ~uint64_t(0));
  const auto band = [words](const uint64_t* in, uint64_t* inout) {
    for (size_t w = 0; w < words; ++w) inout[w] &= in[w];
  };
  const char* names[] = {"MPI_Allreduce", "MPI_Iallreduce + mpi_wait", "RecursiveDoubling"};
  for (int method = 0; method < 3; ++method) {
    double us = 0;
    for (int round = 0; round < 2; ++round) {
      MPI_Barrier(mpi.mpi()->comm());
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) {
        if (method == 0) {
          MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(words), MPI_UINT64_T, MPI_BAND, mpi.mpi()->comm());
        } else if (method == 1) {
          MPI_Request req;
          MPI_Iallreduce(MPI_IN_PLACE, v.data(), static_cast<int>(words), MPI_UINT64_T, MPI_BAND, mpi.mpi()->comm(),
                         &req);
          s = hvl::mpi_wait(&req, "MPI_Iallreduce");
        } else {
          s = rd.run(v.data(), words, band);
        }
        if (!s.ok()) {
          std::fprintf(stderr, "%s: %s\n", names[method], s.message().c_str());
          return 1;
        }
      }
      us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
    }
    if (mpi.rank() == 0) std::printf("%-26s %8.1f us  (%zu words, np %d)\n", names[method], us, words, mpi.size());
  }
  mpi.release();
  MPI_Finalize();
  return 0;
}
