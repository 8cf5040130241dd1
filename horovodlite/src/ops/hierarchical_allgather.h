// The hierarchical host allgather, for jobs on several hosts with the same
// number of ranks each (local_size > 1): first every rank sends its own block
// across hosts, an MPI_Allgatherv over its cross-host communicator (the ranks of
// the same local rank on every host: all local ranks' exchanges run at once,
// each host's data leaves it once per other host), then one MPI_Allgatherv
// inside the host (shared memory) per host, in which local rank j contributes
// the block of local rank j of that host. Blocks go straight to their place in
// the output (any rank placement: displacements, not contiguity).
//
// Bytes leaving each host, for an output of N bytes on H hosts: (H-1)/H * N,
// once. The flat allgather of Open MPI (a ring, or recursive doubling, over all
// ranks) sends blocks across hosts several times: the ring's link out of a host
// carries (HL-1) blocks of N/(HL) bytes on 2x2, 3/4 * N against 1/2 * N here.
// Fused responses use it too (MpiAllgather's packing, exchange() replaced).
//
// In a job without MPI (Gloo) the same two steps run over splits of the
// transport (transport_ops::allgatherv, which packs blocks in rank order: each
// step gathers into scratch and copies the blocks to their places).
#pragma once

#include <vector>

#include "horovodlite/config.h"
#include "ops/mpi_allgather.h"
#include "transport/transport.h"

namespace horovodlite {

class HierarchicalAllgather : public MpiAllgather {
 public:
  // Collective over mpi.comm(): checks the hosts, duplicates the local and cross
  // communicators and learns every rank's host and local rank. `config` must
  // outlive the algorithm: its hierarchical_allgather is read at each response.
  HierarchicalAllgather(const MpiContext& mpi, const Config& config, std::shared_ptr<FusionBuffer> fusion);
  ~HierarchicalAllgather() override;
  const char* name() const override { return "HIERARCHICAL_ALLGATHER"; }
  // Host allgathers whose output reaches the size config.hierarchical_allgather
  // asks for now (auto: RING_THRESHOLD; on: any; off: none).
  bool enabled(const Response& r) const override;

 protected:
  Status exchange(const void* send, void* buf, const std::vector<int>& counts, const std::vector<int>& displs,
                  DataType dtype) override;

 private:
  // The job without MPI: the same layout from the transport's topology, and
  // splits for the two steps (collective over every rank).
  Status set_up_transport();
  Status exchange_transport(void* buf, const std::vector<int>& counts, const std::vector<int>& displs, size_t elem);

  const Config& config_;  // hierarchical_allgather: the live switch
  MPI_Comm local_ = MPI_COMM_NULL;
  MPI_Comm cross_ = MPI_COMM_NULL;
  int local_rank_ = 0;
  // members_[h][j]: the global rank of local rank j on host h (h: cross rank of
  // the host's local rank 0).
  std::vector<std::vector<int>> members_;
  std::vector<int> cross_members_;                 // the global rank of each rank of cross_
  transport::ContextPtr local_wire_, cross_wire_;  // without MPI: the two steps' groups
  std::vector<char> scratch_;
};

}  // namespace horovodlite
