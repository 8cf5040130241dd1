#include "cuda/nccl_context.h"

#include <cuda_runtime_api.h>

#include "cuda/cuda_status.h"
#include "mpi_context.h"

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
