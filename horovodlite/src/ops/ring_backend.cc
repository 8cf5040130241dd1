#include "ops/ring_backend.h"

#include "logging.h"

namespace horovodlite {

RingBackend::RingBackend(const World& world, int64_t threshold, RingAllreduceOptions options,
                         std::shared_ptr<FusionBuffer> fusion)
    : HostAllreduce(world, std::move(fusion)), threshold_(threshold) {
  if (threshold_ < 0) return;
  // Collective: every rank builds the same backends. A failed channel on any
  // rank disables the ring on every rank (they must all choose alike).
  // The ring follows hosts, so that it leaves and enters each host once
  // whatever the mapping of ranks to hosts: each host link then carries one
  // ring edge per direction, the least a flat ring can.
  transport::ContextPtr wire;
  Status dup = world.host_wire()->dup("ring", &wire);
  dup = world.agree(dup, "ring allreduce set-up", "making its channel failed there");
  if (!dup.ok()) {
    HVL_LOG(kWarning, "the ring allreduce is disabled: " << dup.message());
    return;
  }
  ring_ = std::make_unique<RingAllreduce>(std::move(wire), options);
}

bool RingBackend::accepts(DataType, ReduceOp op, int64_t bytes) const {
  return ring_ != nullptr && bytes >= threshold_ && op != ReduceOp::kAdasum;
}

Status RingBackend::reduce(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op, double postscale) {
  return ring_->run(in, out, count, dtype, op, postscale);
}

Status RingBackend::reduce_16bit_wire(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op,
                                      double postscale, DataType wire) {
  return ring_->run_16bit_wire(in, out, count, dtype, op, postscale, wire);
}

}  // namespace horovodlite
