// The communicator the ring tests run on: a duplicate of MPI_COMM_WORLD, made
// once (on first use) and shared by every test file of the ring_tests binary.
#pragma once

#include <mpi.h>

#include <memory>

#include "mpi/mpi_transport.h"

namespace horovodlite {
namespace ring_test {

struct World {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
};

inline const World& world() {
  static World w = [] {
    World x;
    MPI_Comm_dup(MPI_COMM_WORLD, &x.comm);
    MPI_Comm_rank(x.comm, &x.rank);
    MPI_Comm_size(x.comm, &x.size);
    return x;
  }();
  return w;
}

// `comm` as the transport the ring runs over (null for MPI_COMM_NULL); the
// communicator stays the caller's.
inline transport::ContextPtr wire(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return nullptr;
  return std::make_shared<transport::MpiTransport>(comm);
}

}  // namespace ring_test
}  // namespace horovodlite
