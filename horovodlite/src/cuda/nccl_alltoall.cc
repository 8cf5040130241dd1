#include "cuda/nccl_alltoall.h"

#include "cuda/cuda_status.h"
#include "op_util.h"
#include "ops/outputs.h"

namespace horovodlite {
namespace cuda {

Status NcclAlltoall::enqueue(const OpArgs& args, OpOutputs* outputs) {
  const Response& r = args.response;
  TensorEntry& e = *args.entries.at(0);
  const int size = ctx().world().size(), rank = ctx().world().rank();
  std::vector<int64_t> recv_splits;
  HVL_RETURN_IF_ERROR(exchange_splits(e, ctx().world(), &recv_splits));
  const size_t row_bytes = static_cast<size_t>(row_elements(e.input.shape)) * dtype_size(r.dtype);
  int64_t rows = 0;
  for (int64_t s : recv_splits) rows += s;
  TensorView out;
  HVL_RETURN_IF_ERROR(allocate_output(e, with_dim0(e.input.shape, rows), ctx().world(), Status::OK(), &out));
  HVL_RETURN_IF_ERROR(ctx().wait_ready({&e}));
  ncclComm_t comm = ctx().comm()->get();
  cudaStream_t stream = ctx().stream();
  size_t send_off = 0, recv_off = 0;
  HVL_NCCL_CHECK(ncclGroupStart());
  Status s;
  for (int p = 0; p < size && s.ok(); ++p) {
    const size_t sb = static_cast<size_t>(e.splits[p]) * row_bytes;
    const size_t rb = static_cast<size_t>(recv_splits[p]) * row_bytes;
    if (p == rank) {
      if (sb > 0) {
        s = cuda_status(cudaMemcpyAsync(byte_offset(out.data, recv_off), byte_offset(e.input.data, send_off), sb,
                                        cudaMemcpyDeviceToDevice, stream),
                        "cudaMemcpyAsync (alltoall to self)");
      }
    } else {
      if (sb > 0)
        s = nccl_status(ncclSend(byte_offset(e.input.data, send_off), sb, ncclUint8, p, comm, stream), "ncclSend");
      if (s.ok() && rb > 0) {
        s = nccl_status(ncclRecv(byte_offset(out.data, recv_off), rb, ncclUint8, p, comm, stream), "ncclRecv");
      }
    }
    send_off += sb;
    recv_off += rb;
  }
  Status end = nccl_status(ncclGroupEnd(), "ncclGroupEnd");
  HVL_RETURN_IF_ERROR(s);
  HVL_RETURN_IF_ERROR(end);
  outputs->push_back(OpOutput{out, std::move(recv_splits)});
  return Status::OK();
}

}  // namespace cuda
}  // namespace horovodlite
