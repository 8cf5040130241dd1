// The one place that decides which implementations exist in this build, in order
// of preference: host allreduces, and (builds with CUDA) the device path.
#include "cuda/device_ops.h"
#include "ops/host_allreduce.h"
#include "ops/mpi_allreduce.h"
#include "ops/ring_backend.h"

#if HVL_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "cuda/device_executor.h"
#include "cuda/host_staged.h"
#include "ops/nccl_allreduce.h"
#endif

namespace horovodlite {

std::vector<std::unique_ptr<HostAllreduce>> make_host_allreduce(MpiContext& mpi, const Config& config) {
  std::vector<std::unique_ptr<HostAllreduce>> out;
  out.push_back(std::make_unique<RingBackend>(mpi, config));  // large messages
  out.push_back(std::make_unique<MpiAllreduce>(mpi));          // everything else
  return out;
}

#if HVL_HAVE_CUDA

std::unique_ptr<DeviceOps> make_device_ops(MpiContext& mpi, const Config& config, HostExecuteFn host_execute,
                                           HostAllreduceFn host_allreduce) {
  std::vector<std::unique_ptr<cuda::DeviceAllreduce>> allreduce;
  if (config.gpu_operations == Config::GpuOperations::kNccl) {
    if (config.hierarchical_allreduce) allreduce.push_back(std::make_unique<NcclHierarchicalAllreduce>(mpi));
    allreduce.push_back(std::make_unique<NcclAllreduce>());
  }
  allreduce.push_back(std::make_unique<cuda::HostStagedAllreduce>(std::move(host_allreduce)));  // always enabled
  return std::make_unique<cuda::DeviceExecutor>(mpi, config, std::move(host_execute), std::move(allreduce));
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not an error for the host path
    return 0;
  }
  return n;
}

Status check_device(const std::string& name, int device) {
  const int n = device_count();
  if (device >= n) {
    return Status::InvalidArgument("tensor '" + name + "' is on cuda:" + std::to_string(device) + ", but this process " +
                                   (n == 0 ? std::string("sees no CUDA device")
                                           : "sees only " + std::to_string(n) + " CUDA device(s)"));
  }
  return Status::OK();
}

bool device_backend_built() { return true; }
int device_nccl_version() { return NCCL_VERSION_CODE; }

#else

std::unique_ptr<DeviceOps> make_device_ops(MpiContext&, const Config&, HostExecuteFn, HostAllreduceFn) {
  return nullptr;
}

int device_count() { return 0; }

Status check_device(const std::string& name, int device) {
  return Status::Unimplemented("tensor '" + name + "' is on cuda:" + std::to_string(device) +
                               ", but this build of horovodlite has no CUDA support (configure with "
                               "-DHVL_WITH_CUDA=ON, see docs/gpu.md)");
}

bool device_backend_built() { return false; }
int device_nccl_version() { return 0; }

#endif

}  // namespace horovodlite
