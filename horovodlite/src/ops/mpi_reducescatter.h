#pragma once

#include <memory>
#include <vector>

#include "mpi_context.h"
#include "ops/algorithm.h"
#include "ops/fusion.h"

namespace horovodlite {

// MPI_Reduce_scatter of a host tensor: rank i gets the reduced block of rows i
// (the first dim0 % size ranks one row more), prescaled through the fusion buffer.
// A fused response (several names) is one MPI_Reduce_scatter: the fusion buffer
// holds, for each rank in turn, that rank's rows of every tensor, so that each
// rank receives its rows of every tensor in one block, unpacked into the outputs.
class MpiReducescatter : public Algorithm {
 public:
  MpiReducescatter(const MpiContext& mpi, std::shared_ptr<FusionBuffer> fusion)
      : mpi_(mpi), fusion_(std::move(fusion)) {}
  const char* name() const override { return "MPI_REDUCE_SCATTER"; }
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
  virtual Status reduce_scatter(const void* in, void* out, const std::vector<int>& counts, DataType dtype, ReduceOp op);
  const MpiContext& mpi_;

 private:
  Status reducescatter(const Response& r, TensorEntry& e, OpOutput* output);
  Status fused(const OpArgs& args, OpOutputs* outputs);
  std::shared_ptr<FusionBuffer> fusion_;
};

}  // namespace horovodlite
