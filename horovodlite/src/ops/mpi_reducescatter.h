#pragma once

#include <memory>

#include "fusion_buffer.h"
#include "mpi_context.h"
#include "ops/algorithm.h"

namespace horovodlite {

// MPI_Reduce_scatter of a host tensor: rank i gets the reduced block of rows i
// (the first dim0 % size ranks one row more), prescaled through the fusion buffer.
class MpiReducescatter : public Algorithm {
 public:
  MpiReducescatter(const MpiContext& mpi, std::shared_ptr<FusionBuffer> fusion)
      : mpi_(mpi), fusion_(std::move(fusion)) {}
  const char* name() const override { return "MPI_REDUCE_SCATTER"; }
  bool enabled(const Response&) const override { return true; }
  OpResult run(const OpArgs& args) override {
    return OpResult{reducescatter(args.response, *args.entries.at(0)), name()};
  }

 private:
  Status reducescatter(const Response& r, TensorEntry& e);
  const MpiContext& mpi_;
  std::shared_ptr<FusionBuffer> fusion_;
};

}  // namespace horovodlite
