// CUDA and NCCL error codes -> Status (kInternal), naming the call.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "horovodlite/common.h"

namespace horovodlite {
namespace cuda {

inline Status cuda_status(cudaError_t rc, const char* call) {
  if (rc == cudaSuccess) return Status::OK();
  return Status::Internal(std::string(call) + " failed: " + cudaGetErrorName(rc) + ": " + cudaGetErrorString(rc));
}

inline Status nccl_status(ncclResult_t rc, const char* call) {
  if (rc == ncclSuccess) return Status::OK();
  std::string msg = std::string(call) + " failed: " + ncclGetErrorString(rc);
#if NCCL_VERSION_CODE >= 21300
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') msg += std::string(" (") + last + ")";
#endif
  return Status::Internal(msg);
}

}  // namespace cuda
}  // namespace horovodlite

// The CUDA and NCCL members of the error-macro family (HVL_MPI_CHECK in
// mpi/mpi_util.h): evaluate a call and return a Status naming it if it failed.
#define HVL_CUDA_CHECK(call) HVL_RETURN_IF_ERROR(::horovodlite::cuda::cuda_status((call), #call))
#define HVL_NCCL_CHECK(call) HVL_RETURN_IF_ERROR(::horovodlite::cuda::nccl_status((call), #call))
