#pragma once

#include <memory>

#include "fusion_buffer.h"
#include "mpi_context.h"
#include "ops/algorithm.h"

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
    return OpResult{args.entries.size() == 1 ? allgather(args.response, *args.entries[0]) : fused(args), name()};
  }

 private:
  Status allgather(const Response& r, TensorEntry& e);
  Status fused(const OpArgs& args);
  const MpiContext& mpi_;
  std::shared_ptr<FusionBuffer> fusion_;
};

}  // namespace horovodlite
