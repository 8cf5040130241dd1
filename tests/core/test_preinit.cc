// A program that initialises MPI itself: horovodlite must use it and must not
// finalize it.
#include <mpi.h>

#include <cstdio>

#include "horovodlite/horovodlite.h"

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::fprintf(stderr, "FAILED: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      return 1;                                                                \
    }                                                                          \
  } while (0)

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  CHECK(horovodlite::init().ok());
  CHECK(horovodlite::size() == world);
  CHECK(horovodlite::mpi_threads_supported() == (provided == MPI_THREAD_MULTIPLE));
  float x = 1.0f;
  horovodlite::TensorView t{&x, horovodlite::DataType::kFloat32, {1}};
  CHECK(horovodlite::allreduce_async("x", t, t, {horovodlite::ReduceOp::kSum})->wait().ok());
  CHECK(x == static_cast<float>(world));
  CHECK(horovodlite::shutdown().ok());
  int finalized = 1;
  MPI_Finalized(&finalized);
  CHECK(!finalized);
  // The program's own MPI still works.
  int one = 1, sum = 0;
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  CHECK(sum == world);
  MPI_Finalize();
  std::printf("preinit: 1 passed, 0 failed\n");
  return 0;
}
