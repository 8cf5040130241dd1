#pragma once

#include <memory>

#include "mpi_context.h"
#include "ops/algorithm.h"
#include "ops/fusion.h"

namespace horovodlite {

// MPI_Allgatherv of host tensors (dim 0 may differ across ranks). A fused
// response (several names; tensor_sizes holds each name's dim 0 on every rank,
// name-major) is one MPI_Allgatherv through the fusion buffer: each rank's block
// holds its rows of every tensor in turn; unpacking copies rank r's rows of
// tensor t to their place in t's output.
class MpiAllgather : public Algorithm {
 public:
  MpiAllgather(const MpiContext& mpi, std::shared_ptr<FusionBuffer> fusion) : mpi_(mpi), fusion_(std::move(fusion)) {}
  const char* name() const override { return "MPI_ALLGATHERV"; }
  bool enabled(const Response&) const override { return true; }
  OpResult run(const OpArgs& args) override {
    OpOutputs outputs(args.entries.size());
    Status s =
        args.entries.size() == 1 ? allgather(args.response, *args.entries[0], &outputs[0]) : fused(args, &outputs);
    return OpResult{std::move(s), name(), std::move(outputs)};
  }

 protected:
  // The exchange: rank k's block is counts[k] elements of `dtype` at displs[k]
  // in `buf`; every block ends up everywhere. `send`: this rank's block, or
  // nullptr when it is already in place in buf.
  virtual Status exchange(const void* send, void* buf, const std::vector<int>& counts, const std::vector<int>& displs,
                          DataType dtype);
  const MpiContext& mpi_;

 private:
  Status allgather(const Response& r, TensorEntry& e, OpOutput* output);
  Status fused(const OpArgs& args, OpOutputs* outputs);
  std::shared_ptr<FusionBuffer> fusion_;
};

}  // namespace horovodlite
