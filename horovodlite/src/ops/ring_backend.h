#pragma once

#include <memory>

#include "ops/host_allreduce.h"
#include "ops/ring_allreduce.h"

namespace horovodlite {

// Our segmented, pipelined ring (ops/ring_allreduce.h) as a host allreduce, in
// host order (World::host_wire) on a channel of its own so that its tags never
// meet other traffic. Enabled for messages of at least `threshold` bytes (< 0:
// never); the registry chooses it and the options for the world it serves
// (algorithms.cc, mpi/mpi_registry.cc).
class RingBackend : public HostAllreduce {
 public:
  // Collective over the world's ranks (takes the channel).
  RingBackend(const World& world, int64_t threshold, RingAllreduceOptions options,
              std::shared_ptr<FusionBuffer> fusion);
  const char* name() const override { return "RING_ALLREDUCE"; }
  bool accepts(DataType dtype, ReduceOp op, int64_t bytes) const override;
  Status reduce(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op, double postscale) override;
  bool wire16() const override { return true; }
  Status reduce_16bit_wire(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op, double postscale,
                           DataType wire) override;

 private:
  int64_t threshold_;
  std::unique_ptr<RingAllreduce> ring_;
};

}  // namespace horovodlite
