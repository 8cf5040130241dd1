#include "cuda/host_staged_allreduce.h"

#include "cuda/cuda_status.h"

namespace horovodlite {
namespace cuda {

Status HostStagedAllreduce::reduce(void* buffer, int64_t count, DataType dtype, ReduceOp op) {
  if (count == 0) return host_(nullptr, 0, dtype, op);
  const size_t bytes = static_cast<size_t>(count) * dtype_size(dtype);
  cudaStream_t stream = ctx().stream();
  cudaError_t err;
  void* host = stage_.get(bytes, &err);
  if (host == nullptr) return cuda_status(err, "cudaMallocHost (host-staged allreduce)");
  HVL_CUDA_CHECK(cudaMemcpyAsync(host, buffer, bytes, cudaMemcpyDeviceToHost, stream));
  HVL_CUDA_CHECK(cudaStreamSynchronize(stream));  // the core's stream only
  HVL_RETURN_IF_ERROR(host_(host, count, dtype, op));
  HVL_CUDA_CHECK(cudaMemcpyAsync(buffer, host, bytes, cudaMemcpyHostToDevice, stream));
  return Status::OK();
}

}  // namespace cuda
}  // namespace horovodlite
