#pragma once

#include "mpi_context.h"
#include "ops/host_allreduce.h"

namespace horovodlite {

// MPI_Allreduce, in chunks of at most INT_MAX elements.
class MpiAllreduce : public HostAllreduce {
 public:
  explicit MpiAllreduce(MpiContext& mpi) : mpi_(mpi) {}
  const char* name() const override { return "MPI_ALLREDUCE"; }
  bool enabled(DataType, ReduceOp, int64_t) const override { return true; }
  Status run(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op, double postscale) override;

 private:
  MpiContext& mpi_;
};

}  // namespace horovodlite
