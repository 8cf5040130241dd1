#pragma once

#include "mpi_context.h"
#include "ops/algorithm.h"
#include "ops/outputs.h"

namespace horovodlite {

// MPI_Bcast of a host tensor from the root, in chunks of at most INT_MAX elements.
class MpiBroadcast : public Algorithm {
 public:
  explicit MpiBroadcast(const MpiContext& mpi) : mpi_(mpi) {}
  const char* name() const override { return "MPI_BCAST"; }
  bool enabled(const Response&) const override { return true; }
  OpResult run(const OpArgs& args) override {
    return OpResult{broadcast(args.response, *args.entries.at(0)), name(), outputs_in_place(args.entries)};
  }

 protected:
  // `count` elements of `dtype` at `data` from `root` to every rank.
  virtual Status bcast(void* data, int64_t count, DataType dtype, int root);
  const MpiContext& mpi_;

 private:
  Status broadcast(const Response& r, TensorEntry& e);
};

}  // namespace horovodlite
