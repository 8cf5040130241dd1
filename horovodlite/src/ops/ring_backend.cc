#include "ops/ring_backend.h"

#include <algorithm>

#include "logging.h"
#include "ops/ring_segment.h"

namespace horovodlite {

namespace {
constexpr int64_t kDirectTcpSegmentBytes = int64_t{64} << 10;
}  // namespace

RingBackend::RingBackend(const MpiContext& mpi, const Config& config, std::shared_ptr<FusionBuffer> fusion)
    : HostAllreduce(mpi, std::move(fusion)), threshold_(config.ring_threshold_bytes) {
  if (!mpi.uses_mpi()) {
    // A job without MPI: the ring serves every size (there is no MPI_Allreduce
    // to fall back on), in host order, on a channel of its own.
    threshold_ = 0;
    transport::ContextPtr wire;
    Status dup = mpi.host_wire()->dup("ring", &wire);
    dup = mpi.agree(dup, "ring allreduce set-up", "making its channel failed there");
    if (!dup.ok()) {
      HVL_LOG(kWarning, "the ring allreduce is disabled: " << dup.message());
      return;
    }
    RingAllreduceOptions options;
    options.segment_bytes = config.ring_segment_bytes;
    // Across hosts over our own TCP connections, 64 KiB segments, as the MPI
    // path's ring there (ops/ring_segment.h): on 2 simulated hosts 1 MiB took
    // 0.38-0.40 ms against 0.58-0.60 with 256 KiB, 64 MiB 30-34 against 46-71
    // (docs/transport.md).
    if (config.gloo.direct_tcp && mpi.local_size() < mpi.size()) {
      options.segment_bytes = std::min<int64_t>(options.segment_bytes, kDirectTcpSegmentBytes);
    }
    ring_ = std::make_unique<RingAllreduce>(std::move(wire), options);
    return;
  }
  if (threshold_ < 0 || mpi.size() < 2) return;
  // Collective: every rank builds the same backends. A failed duplicate on any
  // rank disables the ring on every rank (they must all choose alike).
  // The ring follows hosts (MpiContext::host_comm: ranks ordered by their host's
  // lowest rank, then by rank), so that it leaves and enters each host once
  // whatever the mapping of ranks to hosts. Each host link then carries one
  // ring edge per direction, the least a flat ring can.
  Status dup = mpi_status(MPI_Comm_dup(mpi.host_comm(), &comm_), "MPI_Comm_dup (ring order)");
  dup = mpi.agree(dup, "ring allreduce set-up", "making its communicator failed there");
  if (!dup.ok()) {
    HVL_LOG(kWarning, "the ring allreduce is disabled, MPI_Allreduce serves every size: " << dup.message());
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    return;
  }
  // Across hosts, segments small enough to go eagerly (ops/ring_segment.h). A
  // host holding every rank holds every rank everywhere: all ranks agree.
  int64_t segment = config.ring_segment_bytes;
  Status seg = ring_segment_bytes(comm_, config.ring_segment_bytes, mpi.local_size() < mpi.size(), &segment);
  seg = mpi.agree(seg, "ring allreduce set-up", "choosing its segment size failed there");
  if (!seg.ok()) {
    HVL_LOG(kWarning, "the ring allreduce is disabled, MPI_Allreduce serves every size: " << seg.message());
    MPI_Comm_free(&comm_);
    return;
  }
  if (segment != config.ring_segment_bytes && mpi.rank() == 0) {
    HVL_LOG(kDebug, "the ring crosses hosts: " << segment << "-byte segments (under btl_tcp_eager_limit)");
  }
  RingAllreduceOptions options;
  options.segment_bytes = segment;
  ring_ = std::make_unique<RingAllreduce>(comm_, options);
}

RingBackend::~RingBackend() {
  ring_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

bool RingBackend::accepts(DataType, ReduceOp op, int64_t bytes) const {
  return ring_ != nullptr && bytes >= threshold_ && op != ReduceOp::kAdasum;
}

Status RingBackend::reduce(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op, double postscale) {
  return ring_->run(in, out, count, dtype, op, postscale);
}

Status RingBackend::reduce_fp16_wire(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op,
                                     double postscale) {
  return ring_->run_fp16_wire(in, out, count, dtype, op, postscale);
}

}  // namespace horovodlite
