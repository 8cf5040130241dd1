// The device resources of one process: the GPU it uses for collectives, the
// core's stream (created once, non-blocking) and the NCCL communicator over all
// ranks. Created lazily, at the first device response (collectively: every rank
// executes the same responses in the same order).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "ops/nccl_context.h"

namespace horovodlite {
namespace cuda {

struct DeviceContext {
  int device = -1;
  cudaStream_t stream = nullptr;
  std::unique_ptr<NcclComm> comm;  // nullptr when device collectives go through the host (GPU_OPERATIONS=mpi)
};

}  // namespace cuda
}  // namespace horovodlite
