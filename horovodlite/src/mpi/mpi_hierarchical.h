// The hierarchical algorithms (ops/hierarchical_allreduce.h,
// ops/hierarchical_allgather.h) in an MPI world: the local steps are MPI
// collectives over a duplicate of the shared-memory local communicator. The
// allreduce's reduce-scatter of piece k+1 and allgather of piece k-1 are then
// non-blocking (MPI_Ireduce_scatter, MPI_Iallgatherv) and progressed while the
// cross-host ring of piece k runs; the ring's segments go eagerly across hosts
// (mpi/ring_segment.h). The allgather's two steps are MPI_Allgatherv in place.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "mpi/mpi_world.h"
#include "ops/hierarchical_allgather.h"
#include "ops/hierarchical_allreduce.h"

namespace horovodlite {

class MpiHierarchicalAllreduce : public HierarchicalAllreduce {
 public:
  // Collective over the world's ranks (an MPI world): duplicates the local and
  // cross communicators.
  MpiHierarchicalAllreduce(const World& world, const Config& config, std::shared_ptr<FusionBuffer> fusion);
  ~MpiHierarchicalAllreduce() override;

 protected:
  Status run_pieces(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op, double postscale,
                    bool compressed, DataType half_type) override;

 private:
  Status set_up(const Config& config);

  const mpi::Comms& comms_;
  MPI_Comm local_ = MPI_COMM_NULL;  // dup of the local communicator: the local steps
};

class MpiHierarchicalAllgather : public HierarchicalAllgather {
 public:
  // Collective over the world's ranks (an MPI world): duplicates the local and
  // cross communicators.
  MpiHierarchicalAllgather(const World& world, const Config& config, std::shared_ptr<FusionBuffer> fusion);
  ~MpiHierarchicalAllgather() override;

 protected:
  Status exchange(const void* send, void* buf, const std::vector<int>& counts, const std::vector<int>& displs,
                  DataType dtype) override;

 private:
  MPI_Comm local_ = MPI_COMM_NULL;
  MPI_Comm cross_ = MPI_COMM_NULL;
};

}  // namespace horovodlite
