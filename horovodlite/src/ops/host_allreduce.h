// Allreduce of a host buffer (in place or into an output): the interface every
// CPU algorithm implements. The runtime asks each registered implementation, in order of
// preference, whether it is enabled for a message, and uses the first that is
// (as Horovod's operation manager does).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "horovodlite/common.h"
#include "horovodlite/config.h"

namespace horovodlite {

class MpiContext;

class HostAllreduce {
 public:
  virtual ~HostAllreduce() = default;
  // The name the timeline shows for the collective, e.g. "MPI_ALLREDUCE".
  virtual const char* name() const = 0;
  virtual bool enabled(DataType dtype, ReduceOp op, int64_t bytes) const = 0;
  // out = (the reduction over ranks of every rank's `in`) * postscale. `in` ==
  // `out` reduces in place; otherwise the two must not overlap and `in` is
  // only read. Average arrives as Sum (the postscale divides). Every rank must
  // pass the same count, dtype, op and postscale. Implementations
  // apply the postscale where it is cheapest (the ring: by the owner of each
  // reduced chunk, before it is passed around); the values are the same as
  // reducing first and scaling every element afterwards.
  virtual Status run(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op, double postscale) = 0;

  // fp16 compression done by the algorithm itself: a float32/float64 buffer is
  // reduced with fp16 on the wire, converted segment by segment (no whole-buffer
  // conversion passes); the result is fp16-rounded (then postscaled) and
  // identical on every rank.
  virtual bool fp16_wire() const { return false; }
  virtual Status run_fp16_wire(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op,
                               double postscale) {
    return Status::Unimplemented(std::string(name()) + " has no fp16-on-the-wire mode");
  }
};

// The implementations for this build and configuration, most preferred first;
// the last one is always enabled.
std::vector<std::unique_ptr<HostAllreduce>> make_host_allreduce(MpiContext& mpi, const Config& config);

}  // namespace horovodlite
