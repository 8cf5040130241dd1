// The hierarchical host allreduce, for jobs on several hosts: a reduce-scatter
// inside each host, an allreduce of each shard across hosts (our pipelined ring
// over the ranks with this local rank on every host: local rank i of every
// host reduces shard i, so every host's link carries L rings at once), and an
// allgather inside each host.
//
// Bytes across hosts, per host and direction, for N bytes on H hosts of L ranks:
// 2 (H-1)/H * N, against 2 (HL-1)/(HL) * N for the flat ring (1.5x fewer on 2x2).
// The buffer goes through in pieces (kPieceBytes). Here the three steps run
// over splits of the world's transport (transport_ops::reducescatter and
// allgatherv inside the host), piece after piece; an MPI world's form
// (mpi/mpi_hierarchical.h) overlaps the local steps of one piece with the ring
// of another.
//
// With fp16 or bf16 compression (wire16) the local steps stay in the buffer's
// precision (shared memory is not the bottleneck) and only the cross-host ring
// carries IEEE binary16 (bfloat16); the result is rounded to it, then postscaled, and is
// bitwise the same on every rank (each shard is reduced by one ring and copied).
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include "horovodlite/config.h"
#include "ops/host_allreduce.h"
#include "ops/ring_allreduce.h"
#include "transport/transport.h"

namespace horovodlite {

// For the hierarchical algorithms (allreduce, allgather). Whether to set one
// up: `mode` (HIERARCHICAL_ALLREDUCE / _ALLGATHER) is not off, or it is
// `tunable` (the autotuner may switch it on), and the job runs on several hosts
// with the same number (> 1) of ranks each (if it was forced on and does not
// apply, rank 0 logs `variable` and why, adding `instead`). Collective over
// the world's ranks unless it returns false at once (every rank reads the same
// configuration).
bool hierarchical_set_up(const World& world, Config::Hierarchical mode, bool tunable, const char* variable,
                         const char* instead);
// From which size in bytes `mode` asks for the algorithm — auto: the ring
// threshold (-1 there: never); on: every size — or -1: off. The algorithms read
// their mode from the configuration at every response, not at set-up: the
// autotuner switches it between cycles (at the same cycle on every rank).
int64_t hierarchical_from_bytes(Config::Hierarchical mode, int64_t ring_threshold_bytes);

class HierarchicalAllreduce : public HostAllreduce {
 public:
  // Bytes of the buffer per pipeline piece.
  static constexpr int64_t kPieceBytes = int64_t{8} << 20;

  // Collective over the world's ranks: checks that every host has the same
  // number of ranks and splits the transport for the steps. Enabled on several
  // hosts with more than one rank each; config.hierarchical_allreduce, read at
  // each response, decides from which size (auto: the ring threshold; on: every
  // size; off: never). `config` must outlive the algorithm.
  HierarchicalAllreduce(const World& world, const Config& config, std::shared_ptr<FusionBuffer> fusion);
  const char* name() const override { return "HIERARCHICAL_ALLREDUCE"; }
  bool accepts(DataType dtype, ReduceOp op, int64_t bytes) const override;
  Status reduce(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op, double postscale) override;
  bool wire16() const override { return true; }
  Status reduce_16bit_wire(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op, double postscale,
                           DataType wire) override;
  // Tests: smaller pieces, so that small buffers still go through several.
  void set_piece_bytes(int64_t bytes) { piece_bytes_ = std::max<int64_t>(1, bytes); }

 protected:
  // For a subclass that sets up its own steps: only whether it applies.
  struct OwnSetUp {};
  HierarchicalAllreduce(const World& world, const Config& config, std::shared_ptr<FusionBuffer> fusion, OwnSetUp);
  // Whether the algorithm applies to this job (hierarchical_set_up).
  bool applies() const { return applies_; }
  // The pieces of a non-empty buffer, through the three steps.
  virtual Status run_pieces(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op, double postscale,
                            bool compressed, DataType half_type);
  Status ensure_scratch(int64_t bytes);

  const Config& config_;  // hierarchical_allreduce: the live switch
  int64_t piece_bytes_ = kPieceBytes;
  int local_rank_ = 0;
  int local_size_ = 1;
  std::unique_ptr<RingAllreduce> ring_;
  std::vector<char> scratch_[2];  // this rank's shard of two pieces in flight

 private:
  Status run(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op, double postscale, bool wire16,
             DataType half_type);
  Status set_up(const Config& config);

  bool applies_ = false;
  transport::ContextPtr local_wire_;  // this host's ranks (the local steps)
};

// Elements of [0, n) per local rank, as even as possible, and their offsets.
void split_evenly(int64_t n, int parts, std::vector<int>* counts, std::vector<int>* displs);

}  // namespace horovodlite
