#include "cuda/nccl_allreduce.h"

#include <algorithm>
#include <climits>

#include "cuda/cuda_status.h"
#include "logging.h"

namespace horovodlite {
namespace cuda {

bool NcclAllreduce::accepts(DataType dtype, ReduceOp op, int64_t) const {
  ncclDataType_t t;
  ncclRedOp_t o;
  return nccl_reduce_type(dtype, op, &t, &o);
}

Status NcclAllreduce::reduce(void* buffer, int64_t count, DataType dtype, ReduceOp op) {
  return reduce_into(buffer, buffer, count, dtype, op);
}

Status NcclAllreduce::reduce_into(const void* send, void* recv, int64_t count, DataType dtype, ReduceOp op) {
  ncclDataType_t t;
  ncclRedOp_t o;
  if (!nccl_reduce_type(dtype, op, &t, &o)) return Status::Internal("NCCL cannot reduce this dtype");
  if (count == 0) return Status::OK();
  HVL_NCCL_CHECK(ncclAllReduce(send, recv, static_cast<size_t>(count), t, o, ctx().comm()->get(), ctx().stream()));
  return Status::OK();
}

NcclHierarchicalAllreduce::NcclHierarchicalAllreduce(std::shared_ptr<DeviceContext> ctx, const World& world)
    : DeviceAllreduce(std::move(ctx)), world_(world) {
  // Collective: every rank builds the same algorithms in the same order. A
  // failure on any rank disables this algorithm on every rank.
  const Status s = world.agree(split(world), "hierarchical allreduce set-up", "its communicators could not be split");
  if (!s.ok()) {
    HVL_LOG(kWarning, "the hierarchical allreduce is disabled: " << s.message());
    homogeneous_ = false;
  }
}

Status NcclHierarchicalAllreduce::split(const World& world) {
  HVL_MPI_CHECK(
      MPI_Comm_split_type(world.mpi()->comm(), MPI_COMM_TYPE_SHARED, world.rank(), MPI_INFO_NULL, &local_comm_));
  HVL_MPI_CHECK(MPI_Comm_rank(local_comm_, &local_rank_));
  HVL_MPI_CHECK(MPI_Comm_size(local_comm_, &local_size_));
  HVL_MPI_CHECK(MPI_Comm_split(world.mpi()->comm(), local_rank_, world.rank(), &cross_comm_));
  HVL_MPI_CHECK(MPI_Comm_size(cross_comm_, &cross_size_));
  int sizes[2] = {local_size_, -local_size_};
  HVL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MAX, world.mpi()->comm()));
  homogeneous_ = sizes[0] == -sizes[1] && static_cast<int64_t>(local_size_) * cross_size_ == world.size();
  return Status::OK();
}

NcclHierarchicalAllreduce::~NcclHierarchicalAllreduce() {
  local_nccl_.reset();
  if (!mpi_running()) return;
  if (cross_comm_ != MPI_COMM_NULL) MPI_Comm_free(&cross_comm_);
  if (local_comm_ != MPI_COMM_NULL) MPI_Comm_free(&local_comm_);
}

bool NcclHierarchicalAllreduce::accepts(DataType dtype, ReduceOp op, int64_t) const {
  ncclDataType_t t;
  ncclRedOp_t o;
  return homogeneous_ && local_size_ > 1 && cross_size_ > 1 && nccl_reduce_type(dtype, op, &t, &o);
}

Status NcclHierarchicalAllreduce::reduce(void* buffer, int64_t count, DataType dtype, ReduceOp op) {
  ncclDataType_t t;
  ncclRedOp_t o;
  if (!nccl_reduce_type(dtype, op, &t, &o)) return Status::Internal("NCCL cannot reduce this dtype");
  if (count % local_size_ != 0) return Status::Internal("hierarchical allreduce: count not padded");
  if (count == 0) return Status::OK();
  cudaStream_t stream = ctx().stream();
  if (local_nccl_ == nullptr) HVL_RETURN_IF_ERROR(NcclComm::create(local_comm_, ctx().device(), &local_nccl_));
  const size_t elem = dtype_size(dtype);
  const int64_t shard = count / local_size_;
  char* mine = static_cast<char*>(buffer) + static_cast<size_t>(local_rank_) * shard * elem;
  // 1. Inside the node: this rank ends up with the node's sum of its shard (in place).
  HVL_NCCL_CHECK(ncclReduceScatter(buffer, mine, static_cast<size_t>(shard), t, o, local_nccl_->get(), stream));
  // 2. Across nodes: the same shard of every node, through pinned host memory.
  cudaError_t err;
  void* host = host_.get(shard * elem, &err);
  if (host == nullptr) return cuda_status(err, "cudaMallocHost (hierarchical allreduce staging)");
  HVL_CUDA_CHECK(cudaMemcpyAsync(host, mine, shard * elem, cudaMemcpyDeviceToHost, stream));
  HVL_CUDA_CHECK(cudaStreamSynchronize(stream));  // this stream only, not the device
  for (int64_t done = 0; done < shard;) {
    const int n = static_cast<int>(std::min<int64_t>(shard - done, INT_MAX));
    HVL_MPI_CHECK_AS(MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(host) + done * elem, n,
                                   world_.mpi()->reduce_type(dtype), world_.mpi()->reduce_op(op, dtype), cross_comm_),
                     "MPI_Allreduce (across nodes)");
    done += n;
  }
  HVL_CUDA_CHECK(cudaMemcpyAsync(mine, host, shard * elem, cudaMemcpyHostToDevice, stream));
  // 3. Inside the node: every rank gets every shard (in place).
  HVL_NCCL_CHECK(ncclAllGather(mine, buffer, static_cast<size_t>(shard), t, local_nccl_->get(), stream));
  return Status::OK();
}

}  // namespace cuda
}  // namespace horovodlite
