// NCCL allreduces of device buffers: flat (ncclAllReduce over all ranks) and
// hierarchical (NCCL reduce-scatter inside the node, MPI allreduce across nodes
// on each rank's shard, NCCL allgather inside the node).
#pragma once

#include <mpi.h>

#include <memory>

#include "cuda/buffers.h"
#include "cuda/device_allreduce.h"
#include "cuda/nccl_context.h"
#include "mpi/mpi_world.h"
#include "world.h"

namespace horovodlite {
namespace cuda {

class NcclAllreduce : public DeviceAllreduce {
 public:
  using DeviceAllreduce::DeviceAllreduce;
  const char* name() const override { return "NCCL_ALLREDUCE"; }
  bool accepts(DataType dtype, ReduceOp op, int64_t bytes) const override;
  Status reduce(void* buffer, int64_t count, DataType dtype, ReduceOp op) override;
  Status reduce_into(const void* send, void* recv, int64_t count, DataType dtype, ReduceOp op) override;
};

class NcclHierarchicalAllreduce : public DeviceAllreduce {
 public:
  // Collective over mpi.comm() (splits it into node-local and cross-node
  // communicators). Enabled only on several nodes with the same number of ranks each.
  NcclHierarchicalAllreduce(std::shared_ptr<DeviceContext> ctx, const World& world);
  ~NcclHierarchicalAllreduce() override;
  const char* name() const override { return "NCCL_HIERARCHICAL_ALLREDUCE"; }
  bool accepts(DataType dtype, ReduceOp op, int64_t bytes) const override;
  int64_t granularity() const override { return local_size_; }
  Status reduce(void* buffer, int64_t count, DataType dtype, ReduceOp op) override;

 private:
  Status split(const World& world);

  const World& world_;
  MPI_Comm local_comm_ = MPI_COMM_NULL;
  MPI_Comm cross_comm_ = MPI_COMM_NULL;
  int local_rank_ = 0, local_size_ = 1, cross_size_ = 1;
  bool homogeneous_ = false;
  std::unique_ptr<NcclComm> local_nccl_;  // created at the first run (collective inside the node)
  PinnedBuffer host_;
};

}  // namespace cuda
}  // namespace horovodlite
