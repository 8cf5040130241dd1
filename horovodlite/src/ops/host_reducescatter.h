#pragma once

#include <memory>
#include <vector>

#include "ops/algorithm.h"
#include "ops/fusion.h"
#include "world.h"

namespace horovodlite {

// Reduce-scatter of a host tensor (the wire's part is the subclass's:
// mpi/mpi_algorithms.h, ops/transport_algorithms.h): rank i gets the reduced block of rows i
// (the first dim0 % size ranks one row more), prescaled through the fusion buffer.
// A fused response (several names) is one reduce-scatter: the fusion buffer
// holds, for each rank in turn, that rank's rows of every tensor, so that each
// rank receives its rows of every tensor in one block, unpacked into the outputs.
class HostReducescatter : public Algorithm {
 public:
  HostReducescatter(const World& world, std::shared_ptr<FusionBuffer> fusion)
      : world_(world), fusion_(std::move(fusion)) {}
  bool enabled(const Response&) const override { return true; }
  OpResult run(const OpArgs& args) override {
    OpOutputs outputs(args.entries.size());
    Status s =
        args.entries.size() == 1 ? reducescatter(args.response, *args.entries[0], &outputs[0]) : fused(args, &outputs);
    return OpResult{std::move(s), name(), std::move(outputs)};
  }

 protected:
  // `in` holds every rank's block in rank order (counts[k] elements of rank k);
  // this rank's block of the reduction (op: Sum for Average) goes to `out`.
  virtual Status reduce_scatter(const void* in, void* out, const std::vector<int>& counts, DataType dtype,
                                ReduceOp op) = 0;
  const World& world_;

 private:
  Status reducescatter(const Response& r, TensorEntry& e, OpOutput* output);
  Status fused(const OpArgs& args, OpOutputs* outputs);
  std::shared_ptr<FusionBuffer> fusion_;
};

}  // namespace horovodlite
