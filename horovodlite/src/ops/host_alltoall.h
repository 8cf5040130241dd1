#pragma once

#include <vector>

#include "ops/algorithm.h"
#include "world.h"

namespace horovodlite {

// Alltoall of host tensors: rows of dim 0 split by each rank's splits; the
// wire's exchange is the subclass's (mpi/mpi_algorithms.h, ops/transport_algorithms.h).
class HostAlltoall : public Algorithm {
 public:
  explicit HostAlltoall(const World& world) : world_(world) {}
  bool enabled(const Response&) const override { return true; }
  OpResult run(const OpArgs& args) override {
    OpOutputs outputs(1);
    Status s = alltoall(args.response, *args.entries.at(0), &outputs[0]);
    return OpResult{std::move(s), name(), std::move(outputs)};
  }

 protected:
  // The exchange: sc[j] elements of `dtype` from `in` at sd[j] go to rank j;
  // rc[j] from rank j arrive in `out` at rd[j].
  virtual Status exchange(const void* in, const std::vector<int>& sc, const std::vector<int>& sd, void* out,
                          const std::vector<int>& rc, const std::vector<int>& rd, DataType dtype) = 0;
  const World& world_;

 private:
  Status alltoall(const Response& r, TensorEntry& e, OpOutput* output);
};

}  // namespace horovodlite
