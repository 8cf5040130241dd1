// Allreduce of host tensors: the base of every CPU allreduce algorithm (MPI, the
// ring, the hierarchical one: ops/hierarchical_allreduce.h). run() is shared: it reduces a single
// tensor straight from its input into its output, or packs fused tensors into the
// fusion buffer, reduces and unpacks (with the pre/postscale and fp16 compression
// applied while copying); an algorithm implements only the buffer-level reduce().
#pragma once

#include <memory>
#include <string>

#include "horovodlite/common.h"
#include "ops/algorithm.h"
#include "ops/fusion.h"
#include "world.h"

namespace horovodlite {

class HostAllreduce : public Algorithm {
 public:
  // `fusion`: the host fusion buffer every host algorithm shares.
  HostAllreduce(const World& world, std::shared_ptr<FusionBuffer> fusion) : world_(world), fusion_(std::move(fusion)) {}

  // Asks accepts() with the dtype and bytes that travel (fp16 or bf16 with
  // compression: what reduce() or reduce_16bit_wire() puts on the wire), as
  // DeviceAllreduce does.
  bool enabled(const Response& response) const final;
  OpResult run(const OpArgs& args) final;

  // ---- what an algorithm implements ----
  virtual bool accepts(DataType dtype, ReduceOp op, int64_t bytes) const = 0;
  // out = (the reduction over ranks of every rank's `in`) * postscale. `in` ==
  // `out` reduces in place; otherwise the two must not overlap and `in` is
  // only read. Average arrives as Sum (the postscale divides). Every rank must
  // pass the same count, dtype, op and postscale. Implementations
  // apply the postscale where it is cheapest (the ring: by the owner of each
  // reduced chunk, before it is passed around); the values are the same as
  // reducing first and scaling every element afterwards.
  virtual Status reduce(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op, double postscale) = 0;
  // fp16/bf16 compression done by the algorithm itself: a float32/float64
  // buffer is reduced with `wire` (kFloat16 or kBFloat16) on the wire, converted
  // segment by segment (no whole-buffer conversion passes); the result is
  // rounded to `wire` (then postscaled) and identical on every rank. Without
  // it, run() converts into a 16-bit fusion buffer and reduces that.
  virtual bool wire16() const { return false; }
  virtual Status reduce_16bit_wire(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op,
                                   double postscale, DataType wire) {
    return Status::Unimplemented(std::string(name()) + " has no 16-bit-on-the-wire mode");
  }
  Status reduce_fp16_wire(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op, double postscale) {
    return reduce_16bit_wire(in, out, count, dtype, op, postscale, DataType::kFloat16);
  }

 protected:
  const World& world_;

 private:
  Status allreduce(const OpArgs& args);
  // Through a fusion buffer of fp16 or bf16 (wire16_type) values.
  Status allreduce_16bit(const OpArgs& args);
  std::shared_ptr<FusionBuffer> fusion_;
};

}  // namespace horovodlite
