// The hierarchical host allgather, for jobs on several hosts with the same
// number of ranks each (local_size > 1): first every rank sends its own block
// across hosts, an allgather over the ranks of the same local rank on every
// host (all local ranks' exchanges run at once, each host's data leaves it
// once per other host), then one allgather inside the host (shared memory)
// per host, in which local rank j contributes
// the block of local rank j of that host. Blocks go straight to their place in
// the output (any rank placement: displacements, not contiguity).
//
// Bytes leaving each host, for an output of N bytes on H hosts: (H-1)/H * N,
// once. The flat allgather of Open MPI (a ring, or recursive doubling, over all
// ranks) sends blocks across hosts several times: the ring's link out of a host
// carries (HL-1) blocks of N/(HL) bytes on 2x2, 3/4 * N against 1/2 * N here.
// Fused responses use it too (HostAllgather's packing, exchange() replaced).
//
// Here the two steps run over splits of the world's transport
// (transport_ops::allgatherv, which packs blocks in rank order: each step
// gathers into scratch and copies the blocks to their places); an MPI world's
// form (mpi/mpi_hierarchical.h) runs them as MPI_Allgatherv in place.
#pragma once

#include <vector>

#include "horovodlite/config.h"
#include "ops/host_allgather.h"
#include "transport/transport.h"

namespace horovodlite {

class HierarchicalAllgather : public HostAllgather {
 public:
  // Collective over the world's ranks: checks the hosts, learns every rank's
  // host and local rank from the transport's topology and splits the transport
  // for the two steps. `config` must outlive the algorithm: its
  // hierarchical_allgather is read at each response.
  HierarchicalAllgather(const World& world, const Config& config, std::shared_ptr<FusionBuffer> fusion);
  const char* name() const override { return "HIERARCHICAL_ALLGATHER"; }
  // Host allgathers whose output reaches the size config.hierarchical_allgather
  // asks for now (auto: RING_THRESHOLD; on: any; off: none).
  bool enabled(const Response& r) const override;

 protected:
  Status exchange(const void* send, void* buf, const std::vector<int>& counts, const std::vector<int>& displs,
                  DataType dtype) override;

  // For a subclass that sets up its own steps: the layout only (collective;
  // layout_known() false where the algorithm does not apply).
  struct OwnSetUp {};
  HierarchicalAllgather(const World& world, const Config& config, std::shared_ptr<FusionBuffer> fusion, OwnSetUp);
  bool layout_known() const { return !members_.empty(); }
  void forget_layout() { members_.clear(); }
  // This rank's own block to its place in buf (send: null when already there).
  void place_own_block(const void* send, void* buf, const std::vector<int>& counts, const std::vector<int>& displs,
                       size_t elem) const;

  const Config& config_;  // hierarchical_allgather: the live switch
  int local_rank_ = 0;
  // members_[h][j]: the global rank of local rank j on host h (h: cross rank of
  // the host's local rank 0).
  std::vector<std::vector<int>> members_;
  std::vector<int> cross_members_;  // the global rank of each rank of the cross-host step

 private:
  // members_, cross_members_, local_rank_ from the transport's topology.
  void learn_layout();
  Status set_up();

  transport::ContextPtr local_wire_, cross_wire_;  // the two steps' groups
  std::vector<char> scratch_;
};

}  // namespace horovodlite
