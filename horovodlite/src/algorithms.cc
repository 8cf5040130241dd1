// The registry listing: every algorithm of this build, most preferred first in
// each (op, placement) list; the last of each list is always enabled. This is the
// one file that knows whether MPI, CUDA and NCCL are built in. Adding an algorithm:
// its own file pair, and one line here (docs/architecture.md).
#include "algorithms.h"

#include <algorithm>

#include "logging.h"
#include "ops/fusion.h"
#include "ops/hierarchical_allgather.h"
#include "ops/hierarchical_allreduce.h"
#include "ops/host_allreduce.h"
#include "ops/ring_backend.h"
#include "ops/transport_algorithms.h"
#include "ops/voted_allreduce.h"
#if HVL_HAVE_MPI
#include "mpi/adasum.h"
#include "mpi/mpi_algorithms.h"
#include "mpi/mpi_hierarchical.h"
#include "mpi/ring_segment.h"
#endif
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

void add_device_algorithms(Registry& reg, const World& world, const Config& config,
                           std::vector<HostAllreduce*> host_allreduce) {
  auto ctx = std::make_shared<cuda::DeviceContext>(world, config);
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
    reg.add(OpType::kAllreduce, kDevice, std::make_unique<cuda::NcclHierarchicalAllreduce>(ctx, world));  // multi-node
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

constexpr int64_t kDirectTcpSegmentBytes = int64_t{64} << 10;

// A world on the transport (Gloo): the project's own algorithms. Not here:
// Adasum and device (CUDA) tensors, which are built on MPI communicators
// (docs/transport.md).
std::unique_ptr<Registry> make_transport_registry(const World& world, const Config& config) {
  auto reg = std::make_unique<Registry>();
  auto fusion = std::make_shared<FusionBuffer>();
  reg->add(OpType::kAllreduce, kHost,
           std::make_unique<UnavailableAllreduce>(
               ReduceOp::kAdasum,
               "Adasum needs an MPI job in this version (start it with mpirun or horovodlite-run "
               "without --gloo), this job runs on Gloo"));
  reg->add(OpType::kAllreduce, kHost, std::make_unique<VotedAllreduce>(world));  // reduced in the negotiation already
  // Several hosts alike, large messages (or as configured): three steps over splits of the transport.
  reg->add(OpType::kAllreduce, kHost, std::make_unique<HierarchicalAllreduce>(world, config, fusion));
  // The ring serves every size (there is no MPI_Allreduce to fall back on).
  // Across hosts over our own TCP connections, 64 KiB segments, as MPI's ring
  // there (mpi/ring_segment.h; docs/transport.md).
  RingAllreduceOptions ring;
  ring.segment_bytes = config.ring_segment_bytes;
  if (config.gloo.direct_tcp && world.local_size() < world.size()) {
    ring.segment_bytes = std::min<int64_t>(ring.segment_bytes, kDirectTcpSegmentBytes);
  }
  reg->add(OpType::kAllreduce, kHost, std::make_unique<RingBackend>(world, 0, ring, fusion));
  reg->add(OpType::kAllgather, kHost, std::make_unique<HierarchicalAllgather>(world, config, fusion));  // several hosts
  reg->add(OpType::kAllgather, kHost, std::make_unique<TransportAllgather>(world, fusion));
  reg->add(OpType::kBroadcast, kHost, std::make_unique<TransportBroadcast>(world));
  reg->add(OpType::kAlltoall, kHost, std::make_unique<TransportAlltoall>(world));
  reg->add(OpType::kReducescatter, kHost, std::make_unique<TransportReducescatter>(world, fusion));
  return reg;
}

#if HVL_HAVE_MPI
// An MPI world: MPI's collectives, with ours where they are faster.
std::unique_ptr<Registry> make_mpi_registry(const World& world, const Config& config) {
  auto reg = std::make_unique<Registry>();
  auto fusion = std::make_shared<FusionBuffer>();  // one host fusion buffer for every host algorithm
  // Host allreduces go into the registry and, typed, into the list the
  // host-staged device allreduce chooses from.
  std::vector<HostAllreduce*> host_allreduce;
  auto allreduce = [&](std::unique_ptr<HostAllreduce> a) {
    host_allreduce.push_back(a.get());
    reg->add(OpType::kAllreduce, kHost, std::move(a));
  };
  // Adasum responses (mpi/adasum.h); enabled for no other op.
  reg->add(OpType::kAllreduce, kHost, std::make_unique<AdasumAllreduce>(world, fusion));

  reg->add(OpType::kAllreduce, kHost, std::make_unique<VotedAllreduce>(world));  // reduced in the negotiation already
  allreduce(std::make_unique<MpiHierarchicalAllreduce>(world, config, fusion));  // several hosts, large messages
  // The ring for large messages (from RING_THRESHOLD; -1: never), with
  // segments that go eagerly across hosts.
  RingAllreduceOptions ring;
  int64_t ring_from = world.size() < 2 ? -1 : config.ring_threshold_bytes;
  if (ring_from >= 0) {
    const Status s = mpi_ring_options(world, config, &ring);
    if (!s.ok()) {
      HVL_LOG(kWarning, "the ring allreduce is disabled, MPI_Allreduce serves every size: " << s.message());
      ring_from = -1;
    }
  }
  allreduce(std::make_unique<RingBackend>(world, ring_from, ring, fusion));
  allreduce(std::make_unique<MpiAllreduce>(world, fusion));  // everything else
  reg->add(OpType::kAllgather, kHost, std::make_unique<MpiHierarchicalAllgather>(world, config, fusion));
  reg->add(OpType::kAllgather, kHost, std::make_unique<MpiAllgather>(world, fusion));
  reg->add(OpType::kBroadcast, kHost, std::make_unique<MpiBroadcast>(world));
  reg->add(OpType::kAlltoall, kHost, std::make_unique<MpiAlltoall>(world));
  reg->add(OpType::kReducescatter, kHost, std::make_unique<MpiReducescatter>(world, fusion));
#if HVL_HAVE_CUDA
  add_device_algorithms(*reg, world, config, host_allreduce);
#endif
  return reg;
}
#endif

}  // namespace

std::unique_ptr<Registry> make_registry(const World& world, const Config& config) {
#if HVL_HAVE_MPI
  if (world.mpi() != nullptr) return make_mpi_registry(world, config);
#endif
  return make_transport_registry(world, config);
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
