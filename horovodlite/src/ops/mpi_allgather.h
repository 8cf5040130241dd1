#pragma once

#include "mpi_context.h"
#include "ops/algorithm.h"

namespace horovodlite {

// MPI_Allgatherv of host tensors (dim 0 may differ across ranks).
class MpiAllgather : public Algorithm {
 public:
  explicit MpiAllgather(const MpiContext& mpi) : mpi_(mpi) {}
  const char* name() const override { return "MPI_ALLGATHERV"; }
  bool enabled(const Response&) const override { return true; }
  OpResult run(const OpArgs& args) override { return OpResult{allgather(args.response, *args.entries.at(0)), name()}; }

 private:
  Status allgather(const Response& r, TensorEntry& e);
  const MpiContext& mpi_;
};

}  // namespace horovodlite
