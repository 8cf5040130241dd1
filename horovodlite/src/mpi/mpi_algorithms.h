// The host collectives as MPI's own (MPI_Allreduce, MPI_Allgatherv, MPI_Bcast,
// MPI_Alltoallv, MPI_Reduce_scatter) for an MPI world: the host algorithms'
// set-up, fusion and output handling (ops/host_*.h) with MPI's call as the
// exchange. Counts go in chunks of at most INT_MAX elements where MPI's int
// count would overflow.
#pragma once

#include <memory>
#include <vector>

#include "mpi/mpi_world.h"
#include "ops/host_allgather.h"
#include "ops/host_allreduce.h"
#include "ops/host_alltoall.h"
#include "ops/host_broadcast.h"
#include "ops/host_reducescatter.h"
#include "world.h"

namespace horovodlite {

// Accepts everything: it ends the host allreduce list.
class MpiAllreduce : public HostAllreduce {
 public:
  MpiAllreduce(const World& world, std::shared_ptr<FusionBuffer> fusion)
      : HostAllreduce(world, std::move(fusion)), comms_(*world.mpi()) {}
  const char* name() const override { return "MPI_ALLREDUCE"; }
  bool accepts(DataType, ReduceOp, int64_t) const override { return true; }
  Status reduce(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op, double postscale) override;

 private:
  const mpi::Comms& comms_;
};

class MpiAllgather : public HostAllgather {
 public:
  MpiAllgather(const World& world, std::shared_ptr<FusionBuffer> fusion)
      : HostAllgather(world, std::move(fusion)), comms_(*world.mpi()) {}
  const char* name() const override { return "MPI_ALLGATHERV"; }

 protected:
  Status exchange(const void* send, void* buf, const std::vector<int>& counts, const std::vector<int>& displs,
                  DataType dtype) override;
  const mpi::Comms& comms_;
};

class MpiBroadcast : public HostBroadcast {
 public:
  explicit MpiBroadcast(const World& world) : HostBroadcast(world), comms_(*world.mpi()) {}
  const char* name() const override { return "MPI_BCAST"; }

 protected:
  Status bcast(void* data, int64_t count, DataType dtype, int root) override;

 private:
  const mpi::Comms& comms_;
};

class MpiAlltoall : public HostAlltoall {
 public:
  explicit MpiAlltoall(const World& world) : HostAlltoall(world), comms_(*world.mpi()) {}
  const char* name() const override { return "MPI_ALLTOALLV"; }

 protected:
  Status exchange(const void* in, const std::vector<int>& sc, const std::vector<int>& sd, void* out,
                  const std::vector<int>& rc, const std::vector<int>& rd, DataType dtype) override;

 private:
  const mpi::Comms& comms_;
};

class MpiReducescatter : public HostReducescatter {
 public:
  MpiReducescatter(const World& world, std::shared_ptr<FusionBuffer> fusion)
      : HostReducescatter(world, std::move(fusion)), comms_(*world.mpi()) {}
  const char* name() const override { return "MPI_REDUCE_SCATTER"; }

 protected:
  Status reduce_scatter(const void* in, void* out, const std::vector<int>& counts, DataType dtype,
                        ReduceOp op) override;

 private:
  const mpi::Comms& comms_;
};

}  // namespace horovodlite
