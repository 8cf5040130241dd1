#pragma once

#include "mpi_context.h"
#include "ops/algorithm.h"

namespace horovodlite {

// MPI_Alltoallv of host tensors: rows of dim 0 split by each rank's splits.
class MpiAlltoall : public Algorithm {
 public:
  explicit MpiAlltoall(const MpiContext& mpi) : mpi_(mpi) {}
  const char* name() const override { return "MPI_ALLTOALLV"; }
  bool enabled(const Response&) const override { return true; }
  OpResult run(const OpArgs& args) override {
    OpOutputs outputs(1);
    Status s = alltoall(args.response, *args.entries.at(0), &outputs[0]);
    return OpResult{std::move(s), name(), std::move(outputs)};
  }

 private:
  Status alltoall(const Response& r, TensorEntry& e, OpOutput* output);
  const MpiContext& mpi_;
};

}  // namespace horovodlite
