#pragma once

#include "horovodlite/config.h"
#include "ops/host_allreduce.h"
#include "ops/ring_allreduce.h"

namespace horovodlite {

// Our segmented, pipelined ring (ops/ring_allreduce.h) as a host allreduce, on a
// communicator of its own so that its tags never meet other traffic. Enabled for
// messages of at least the configured ring threshold, on two or more ranks.
class RingBackend : public HostAllreduce {
 public:
  // Collective over mpi's ranks (duplicates its host-ordered communicator, or
  // in a job without MPI takes a channel of the transport, and then serves
  // every size: there is no MPI_Allreduce there).
  RingBackend(const MpiContext& mpi, const Config& config, std::shared_ptr<FusionBuffer> fusion);
  ~RingBackend() override;
  const char* name() const override { return "RING_ALLREDUCE"; }
  bool accepts(DataType dtype, ReduceOp op, int64_t bytes) const override;
  Status reduce(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op, double postscale) override;
  bool fp16_wire() const override { return true; }
  Status reduce_fp16_wire(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op,
                          double postscale) override;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int64_t threshold_;
  std::unique_ptr<RingAllreduce> ring_;
};

}  // namespace horovodlite
