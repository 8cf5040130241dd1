#include "ops/ring_backend.h"

#include "logging.h"

namespace horovodlite {

RingBackend::RingBackend(const MpiContext& mpi, const Config& config, std::shared_ptr<FusionBuffer> fusion)
    : HostAllreduce(mpi, std::move(fusion)), threshold_(config.ring_threshold_bytes) {
  if (threshold_ < 0 || mpi.size() < 2) return;
  // Collective: every rank builds the same backends. A failed duplicate on any
  // rank disables the ring on every rank (they must all choose alike).
  const Status dup = agree_across_ranks(mpi.comm(), mpi_status(MPI_Comm_dup(mpi.comm(), &comm_), "MPI_Comm_dup"),
                                        "ring allreduce set-up", "MPI_Comm_dup failed there");
  if (!dup.ok()) {
    HVL_LOG(kWarning, "the ring allreduce is disabled, MPI_Allreduce serves every size: " << dup.message());
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    return;
  }
  RingAllreduceOptions options;
  options.segment_bytes = config.ring_segment_bytes;
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
