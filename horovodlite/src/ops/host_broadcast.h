#pragma once

#include "ops/algorithm.h"
#include "ops/outputs.h"
#include "world.h"

namespace horovodlite {

// Broadcast of a host tensor from the root; the wire's part is the subclass's
// (mpi/mpi_algorithms.h, ops/transport_algorithms.h).
class HostBroadcast : public Algorithm {
 public:
  explicit HostBroadcast(const World& world) : world_(world) {}
  bool enabled(const Response&) const override { return true; }
  OpResult run(const OpArgs& args) override {
    return OpResult{broadcast(args.response, *args.entries.at(0)), name(), outputs_in_place(args.entries)};
  }

 protected:
  // `count` elements of `dtype` at `data` from `root` to every rank.
  virtual Status bcast(void* data, int64_t count, DataType dtype, int root) = 0;
  const World& world_;

 private:
  Status broadcast(const Response& r, TensorEntry& e);
};

}  // namespace horovodlite
