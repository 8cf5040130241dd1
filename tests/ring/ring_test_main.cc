// GoogleTest main for the ring tests: plain MPI (no horovodlite runtime).
// Rank 0 prints the report; other ranks print only their failures. Every rank
// exits non-zero if a test failed on any rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "mpi_test_listener.h"

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  hvl_test::report_from_rank(rank);
  const int local_rc = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_rc = local_rc;
  MPI_Allreduce(&local_rc, &any_rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any_rc != 0 && local_rc == 0) std::fprintf(stderr, "a test failed on another rank\n");
  MPI_Finalize();
  return any_rc;
}
