// GoogleTest main for suites that run as several MPI processes. Every rank runs
// every test; rank 0 prints the usual report, the other ranks print only their
// failures (prefixed with the rank). Each process exits non-zero if a test failed
// on it, and mpirun then fails the whole job.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "horovodlite/horovodlite.h"
#include "mpi_test_listener.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  horovodlite::Status s = horovodlite::init();
  if (!s.ok()) {
    std::fprintf(stderr, "horovodlite::init failed: %s\n", s.to_string().c_str());
    return 2;
  }
  const int rank = horovodlite::rank();
  hvl_test::report_from_rank(rank);
  int rc = RUN_ALL_TESTS();
  if (horovodlite::is_initialized()) {
    // A test that leaves a failed job behind (a stall, a peer's exit) may
    // shut down with that reason: the tests' verdict stands, say why.
    const horovodlite::Status down = horovodlite::shutdown();
    if (!down.ok()) std::fprintf(stderr, "rank %d: shutdown: %s\n", rank, down.to_string().c_str());
  }
  return rc;
}
