#pragma once

#include "ops/host_allreduce.h"

namespace horovodlite {

// MPI_Allreduce, in chunks of at most INT_MAX elements. Accepts everything: it
// ends the host allreduce list.
class MpiAllreduce : public HostAllreduce {
 public:
  using HostAllreduce::HostAllreduce;
  const char* name() const override { return "MPI_ALLREDUCE"; }
  bool accepts(DataType, ReduceOp, int64_t) const override { return true; }
  Status reduce(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op, double postscale) override;
};

}  // namespace horovodlite
