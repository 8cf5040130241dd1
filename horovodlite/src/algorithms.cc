// The registry listing: every algorithm of this build, most preferred first in
// each (op, placement) list; the last of each list is always enabled. This is the
// one file that knows whether CUDA and NCCL are built in. Adding an algorithm:
// its own file pair, and one line here (docs/architecture.md).
#include "algorithms.h"

#include "ops/adasum.h"
#include "ops/fusion.h"
#include "ops/hierarchical_allgather.h"
#include "ops/hierarchical_allreduce.h"
#include "ops/host_allreduce.h"
#include "ops/mpi_allgather.h"
#include "ops/mpi_allreduce.h"
#include "ops/mpi_alltoall.h"
#include "ops/mpi_broadcast.h"
#include "ops/mpi_reducescatter.h"
#include "ops/ring_backend.h"
#include "ops/transport_algorithms.h"
#include "ops/voted_allreduce.h"
#if HVL_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "cuda/device_context.h"
#include "cuda/host_staged.h"
#include "cuda/host_staged_adasum.h"
#include "cuda/host_staged_allreduce.h"
#include "cuda/nccl_allgather.h"
#include "cuda/nccl_allreduce.h"
#include "cuda/nccl_alltoall.h"
#include "cuda/nccl_broadcast.h"
#include "cuda/nccl_reducescatter.h"
#endif

namespace horovodlite {

namespace {

constexpr Placement kHost = Placement::kHost;

#if HVL_HAVE_CUDA
constexpr Placement kDevice = Placement::kDevice;

void add_device_algorithms(Registry& reg, const MpiContext& mpi, const Config& config,
                           std::vector<HostAllreduce*> host_allreduce) {
  auto ctx = std::make_shared<cuda::DeviceContext>(mpi, config);
  reg.keep(ctx);
  // The host-staged algorithms run the host's choice on pinned copies.
  cuda::HostRunFn on_host = [r = &reg](const OpArgs& a) {
    Algorithm* host = r->choose(a.response);
    if (host == nullptr) {
      return OpResult(Status::Internal(std::string("no host algorithm is enabled for the host-staged ") +
                                       op_type_name(a.response.type) + " of '" + a.response.names[0] + "'"));
    }
    return host->run(a);
  };
  cuda::HostAllreduceFn allreduce_on_host = [host_allreduce](void* buf, int64_t count, DataType dtype, ReduceOp op) {
    const int64_t bytes = count * static_cast<int64_t>(dtype_size(dtype));
    for (HostAllreduce* a : host_allreduce) {
      if (a->accepts(dtype, op, bytes)) return a->reduce(buf, buf, count, dtype, op, 1.0);
    }
    return Status::Internal("no host allreduce accepts this buffer");
  };
  const bool nccl = config.gpu_operations == Config::GpuOperations::kNccl;
  reg.add(OpType::kAllreduce, kDevice, std::make_unique<cuda::HostStagedAdasum>(ctx, on_host));  // op Adasum
  if (nccl && config.hierarchical_allreduce == Config::Hierarchical::kOn) {
    reg.add(OpType::kAllreduce, kDevice, std::make_unique<cuda::NcclHierarchicalAllreduce>(ctx, mpi));  // multi-node
  }
  if (nccl) {
    reg.add(OpType::kAllreduce, kDevice, std::make_unique<cuda::NcclAllreduce>(ctx));
    reg.add(OpType::kAllgather, kDevice, std::make_unique<cuda::NcclAllgather>(ctx));
    reg.add(OpType::kBroadcast, kDevice, std::make_unique<cuda::NcclBroadcast>(ctx));
    reg.add(OpType::kAlltoall, kDevice, std::make_unique<cuda::NcclAlltoall>(ctx));
    reg.add(OpType::kReducescatter, kDevice, std::make_unique<cuda::NcclReducescatter>(ctx));  // NCCL's dtypes
  }
  reg.add(OpType::kAllreduce, kDevice, std::make_unique<cuda::HostStagedAllreduce>(ctx, allreduce_on_host));
  for (OpType op : {OpType::kAllgather, OpType::kBroadcast, OpType::kAlltoall, OpType::kReducescatter}) {
    reg.add(op, kDevice, std::make_unique<cuda::HostStaged>(ctx, on_host));
  }
}
#endif

// A job without MPI (Gloo): the project's own algorithms over the transport.
// Not yet here: Adasum and device (CUDA) tensors, which are built on MPI
// communicators (docs/transport.md).
std::unique_ptr<Registry> make_transport_registry(const MpiContext& mpi, const Config& config) {
  auto reg = std::make_unique<Registry>();
  auto fusion = std::make_shared<FusionBuffer>();
  reg->add(OpType::kAllreduce, kHost,
           std::make_unique<UnavailableAllreduce>(
               ReduceOp::kAdasum,
               "Adasum needs an MPI job in this version (start it with mpirun or horovodlite-run "
               "without --gloo), this job runs on Gloo"));
  reg->add(OpType::kAllreduce, kHost, std::make_unique<VotedAllreduce>(mpi));  // reduced in the negotiation already
  // Several hosts alike, large messages (or as configured): three steps over splits of the transport.
  reg->add(OpType::kAllreduce, kHost, std::make_unique<HierarchicalAllreduce>(mpi, config, fusion));
  reg->add(OpType::kAllreduce, kHost, std::make_unique<RingBackend>(mpi, config, fusion));            // every size
  reg->add(OpType::kAllgather, kHost, std::make_unique<HierarchicalAllgather>(mpi, config, fusion));  // several hosts
  reg->add(OpType::kAllgather, kHost, std::make_unique<TransportAllgather>(mpi, fusion));
  reg->add(OpType::kBroadcast, kHost, std::make_unique<TransportBroadcast>(mpi));
  reg->add(OpType::kAlltoall, kHost, std::make_unique<TransportAlltoall>(mpi));
  reg->add(OpType::kReducescatter, kHost, std::make_unique<TransportReducescatter>(mpi, fusion));
  return reg;
}

}  // namespace

std::unique_ptr<Registry> make_registry(const MpiContext& mpi, const Config& config) {
  if (!mpi.uses_mpi()) return make_transport_registry(mpi, config);
  auto reg = std::make_unique<Registry>();
  auto fusion = std::make_shared<FusionBuffer>();  // one host fusion buffer for every host algorithm
  // Host allreduces go into the registry and, typed, into the list the
  // host-staged device allreduce chooses from.
  std::vector<HostAllreduce*> host_allreduce;
  auto allreduce = [&](std::unique_ptr<HostAllreduce> a) {
    host_allreduce.push_back(a.get());
    reg->add(OpType::kAllreduce, kHost, std::move(a));
  };
  // Adasum responses (ops/adasum.h); enabled for no other op.
  reg->add(OpType::kAllreduce, kHost, std::make_unique<AdasumAllreduce>(mpi, fusion));

  reg->add(OpType::kAllreduce, kHost, std::make_unique<VotedAllreduce>(mpi));  // reduced in the negotiation already
  allreduce(std::make_unique<HierarchicalAllreduce>(mpi, config, fusion));     // several hosts, large messages
  allreduce(std::make_unique<RingBackend>(mpi, config, fusion));               // large messages
  allreduce(std::make_unique<MpiAllreduce>(mpi, fusion));                      // everything else
  reg->add(OpType::kAllgather, kHost, std::make_unique<HierarchicalAllgather>(mpi, config, fusion));  // several hosts
  reg->add(OpType::kAllgather, kHost, std::make_unique<MpiAllgather>(mpi, fusion));
  reg->add(OpType::kBroadcast, kHost, std::make_unique<MpiBroadcast>(mpi));
  reg->add(OpType::kAlltoall, kHost, std::make_unique<MpiAlltoall>(mpi));
  reg->add(OpType::kReducescatter, kHost, std::make_unique<MpiReducescatter>(mpi, fusion));
#if HVL_HAVE_CUDA
  add_device_algorithms(*reg, mpi, config, host_allreduce);
#endif
  return reg;
}

#if HVL_HAVE_CUDA

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
    return Status::InvalidArgument(
        "tensor '" + name + "' is on cuda:" + std::to_string(device) + ", but this process " +
        (n == 0 ? std::string("sees no CUDA device") : "sees only " + std::to_string(n) + " CUDA device(s)"));
  }
  return Status::OK();
}

bool device_backend_built() { return true; }
int device_nccl_version() { return NCCL_VERSION_CODE; }
int device_runtime_version() { return CUDART_VERSION; }

#else

int device_count() { return 0; }

Status check_device(const std::string& name, int device) {
  return Status::Unimplemented("tensor '" + name + "' is on cuda:" + std::to_string(device) +
                               ", but this build of horovodlite has no CUDA support (configure with "
                               "-DHVL_WITH_CUDA=ON, see docs/gpu.md)");
}

bool device_backend_built() { return false; }
int device_nccl_version() { return 0; }
int device_runtime_version() { return 0; }

#endif

}  // namespace horovodlite
