#pragma once

#include <vector>

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

 protected:
  // The exchange: sc[j] elements of `dtype` from `in` at sd[j] go to rank j;
  // rc[j] from rank j arrive in `out` at rd[j].
  virtual Status exchange(const void* in, const std::vector<int>& sc, const std::vector<int>& sd, void* out,
                          const std::vector<int>& rc, const std::vector<int>& rd, DataType dtype);
  const MpiContext& mpi_;

 private:
  Status alltoall(const Response& r, TensorEntry& e, OpOutput* output);
};

}  // namespace horovodlite
