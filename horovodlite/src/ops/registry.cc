// The one place that decides which implementations exist in this build, in order
// of preference.
#include "ops/host_allreduce.h"
#include "ops/mpi_allreduce.h"
#include "ops/ring_backend.h"

namespace horovodlite {

std::vector<std::unique_ptr<HostAllreduce>> make_host_allreduce(MpiContext& mpi, const Config& config) {
  std::vector<std::unique_ptr<HostAllreduce>> out;
  out.push_back(std::make_unique<RingBackend>(mpi, config));  // large messages
  out.push_back(std::make_unique<MpiAllreduce>(mpi));          // everything else
  return out;
}

}  // namespace horovodlite
