#include "cuda/nccl_context.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/cuda_status.h"
#include "mpi/mpi_util.h"

namespace horovodlite {
namespace cuda {

Status NcclComm::create(MPI_Comm comm, int device, std::unique_ptr<NcclComm>* out) {
  std::unique_ptr<NcclComm> c(new NcclComm());
  HVL_MPI_CHECK(MPI_Comm_rank(comm, &c->rank_));
  HVL_MPI_CHECK(MPI_Comm_size(comm, &c->size_));
  c->device_ = device;
  ncclUniqueId id;
  Status local = c->rank_ == 0 ? nccl_status(ncclGetUniqueId(&id), "ncclGetUniqueId") : Status::OK();
  // Rank 0 tells the others whether it has an id, so that a failure there is an
  // error everywhere rather than a hang in ncclCommInitRank.
  int ok = local.ok() ? 1 : 0;
  HVL_MPI_CHECK(MPI_Bcast(&ok, 1, MPI_INT, 0, comm));
  if (!ok) return local.ok() ? Status::Internal("rank 0 could not create an NCCL unique id") : local;
  HVL_MPI_CHECK_AS(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm), "MPI_Bcast (NCCL unique id)");
  HVL_CUDA_CHECK(cudaSetDevice(device));
  HVL_NCCL_CHECK(ncclCommInitRank(&c->comm_, c->size_, id, c->rank_));
  *out = std::move(c);
  return Status::OK();
}

namespace {

// What each rank tells the others about its GPU (plain bytes over MPI).
struct GpuIdentity {
  unsigned char uuid[16];
  char bus_id[32];
  char host[64];
  int32_t device;
  int32_t known;  // 0: this rank could not identify its GPU (not compared)
};

std::string uuid_string(const unsigned char* u) {
  // nvidia-smi's spelling: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
  char buf[48];
  std::snprintf(buf, sizeof(buf), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  return buf;
}

std::string join_ranks(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

Status check_one_gpu_per_rank(MPI_Comm comm, int device) {
  int size = 1;
  HVL_MPI_CHECK(MPI_Comm_size(comm, &size));
  GpuIdentity mine;
  std::memset(&mine, 0, sizeof(mine));
  mine.device = device;
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device) == cudaSuccess &&
      cudaDeviceGetPCIBusId(mine.bus_id, sizeof(mine.bus_id), device) == cudaSuccess) {
    std::memcpy(mine.uuid, prop.uuid.bytes, sizeof(mine.uuid));
    mine.known = 1;
  } else {
    cudaGetLastError();  // not sticky: the communicator's own set-up reports a real failure
  }
  int len = 0;
  char host[MPI_MAX_PROCESSOR_NAME];
  if (MPI_Get_processor_name(host, &len) == MPI_SUCCESS) std::snprintf(mine.host, sizeof(mine.host), "%.*s", len, host);
  std::vector<GpuIdentity> all(static_cast<size_t>(size));
  HVL_MPI_CHECK_AS(MPI_Allgather(&mine, sizeof(mine), MPI_BYTE, all.data(), sizeof(mine), MPI_BYTE, comm),
                   "MPI_Allgather (GPU identities)");
  // Every rank sees the same table, so every rank returns the same status.
  std::vector<bool> seen(all.size(), false);
  std::string shared;
  int groups = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (!all[i].known || seen[i]) continue;
    std::vector<int> ranks{static_cast<int>(i)};
    for (size_t j = i + 1; j < all.size(); ++j) {
      if (all[j].known && std::memcmp(all[i].uuid, all[j].uuid, sizeof(all[i].uuid)) == 0) {
        ranks.push_back(static_cast<int>(j));
        seen[j] = true;
      }
    }
    if (ranks.size() < 2) continue;
    if (groups++ > 0) {
      shared += "; ";
    }
    std::string devices;
    for (int r : ranks) devices += std::string(devices.empty() ? "" : ", ") + "cuda:" + std::to_string(all[r].device);
    shared += "ranks " + join_ranks(ranks) + " all use GPU " + uuid_string(all[i].uuid) + " (PCI " +
              std::string(all[i].bus_id, strnlen(all[i].bus_id, sizeof(all[i].bus_id))) + " on host '" +
              std::string(all[i].host, strnlen(all[i].host, sizeof(all[i].host))) + "', as " + devices + ")";
  }
  if (groups == 0) return Status::OK();
  return Status::Precondition(
      "NCCL needs one GPU per rank, but " + shared +
      ". Pin each rank to its own GPU before its first CUDA tensor, e.g. torch.cuda.set_device(hvd.local_rank()) "
      "(C++: put the rank's tensors on cuda:<local rank>), or run device collectives through the host with "
      "HOROVODLITE_GPU_OPERATIONS=mpi. Device collectives fail with this error until shutdown()");
}

NcclComm::~NcclComm() {
  if (comm_ != nullptr) ncclCommDestroy(comm_);
}

bool nccl_reduce_type(DataType dtype, ReduceOp op, ncclDataType_t* type, ncclRedOp_t* nccl_op) {
  switch (op) {
    case ReduceOp::kMin:
      *nccl_op = ncclMin;
      break;
    case ReduceOp::kMax:
      *nccl_op = ncclMax;
      break;
    case ReduceOp::kProduct:
      *nccl_op = ncclProd;
      break;
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      *nccl_op = ncclSum;
      break;
    default:
      return false;
  }
  switch (dtype) {
    case DataType::kUInt8:
      *type = ncclUint8;
      return true;
    case DataType::kInt8:
      *type = ncclInt8;
      return true;
    case DataType::kInt16:
      return false;
    case DataType::kInt32:
      *type = ncclInt32;
      return true;
    case DataType::kInt64:
      *type = ncclInt64;
      return true;
    case DataType::kFloat16:
      *type = ncclFloat16;
      return true;
    case DataType::kBFloat16:
#if NCCL_VERSION_CODE >= 21000
      *type = ncclBfloat16;
      return true;
#else
      return false;
#endif
    case DataType::kFloat32:
      *type = ncclFloat32;
      return true;
    case DataType::kFloat64:
      *type = ncclFloat64;
      return true;
    case DataType::kBool:
      *type = ncclUint8;
      *nccl_op = (op == ReduceOp::kMin || op == ReduceOp::kProduct) ? ncclMin : ncclMax;
      return true;
  }
  return false;
}

}  // namespace cuda
}  // namespace horovodlite
