#pragma once

#include <memory>

#include "ops/algorithm.h"
#include "ops/fusion.h"
#include "world.h"

namespace horovodlite {

// Allgather of host tensors (dim 0 may differ across ranks): output
// allocation, fusion and unpacking; the wire's exchange is the subclass's
// (mpi/mpi_algorithms.h, ops/transport_algorithms.h). A fused response (several
// names; tensor_sizes holds each name's dim 0 on every rank, name-major) is one
// exchange through the fusion buffer: each rank's block
// holds its rows of every tensor in turn; unpacking copies rank r's rows of
// tensor t to their place in t's output.
class HostAllgather : public Algorithm {
 public:
  HostAllgather(const World& world, std::shared_ptr<FusionBuffer> fusion) : world_(world), fusion_(std::move(fusion)) {}
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
                          DataType dtype) = 0;
  const World& world_;

 private:
  Status allgather(const Response& r, TensorEntry& e, OpOutput* output);
  Status fused(const OpArgs& args, OpOutputs* outputs);
  std::shared_ptr<FusionBuffer> fusion_;
};

}  // namespace horovodlite
