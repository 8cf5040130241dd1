#include "cuda/nccl_reducescatter.h"

#include <algorithm>

#include "cuda/cuda_status.h"
#include "cuda/kernels.h"
#include "horovodlite/horovodlite.h"
#include "op_util.h"
#include "ops/outputs.h"

namespace horovodlite {
namespace cuda {

bool NcclReducescatter::enabled(const Response& r) const {
  ncclDataType_t t;
  ncclRedOp_t o;
  return nccl_reduce_type(r.dtype, effective_op(r.reduce_op), &t, &o);
}

Status NcclReducescatter::enqueue(const OpArgs& args, OpOutputs* outputs) {
  const Response& r = args.response;
  TensorEntry& e = *args.entries.at(0);
  const int size = ctx().world().size(), rank = ctx().world().rank();
  const Shape& shape = e.input.shape;
  const size_t elem = dtype_size(r.dtype);
  const std::vector<int64_t> counts = reducescatter_counts(shape, size);
  std::vector<int64_t> displ(size);
  int64_t off = 0;
  for (int i = 0; i < size; ++i) {
    displ[i] = off;
    off += counts[i];
  }
  TensorView out;
  HVL_RETURN_IF_ERROR(allocate_output(e, with_dim0(shape, reducescatter_rows(shape[0], size, rank)), ctx().world(),
                                      Status::OK(), &out));
  HVL_RETURN_IF_ERROR(ctx().wait_ready({&e}));
  cudaStream_t stream = ctx().stream();
  const void* send = e.input.data;
  if (r.prescale != 1.0 && off > 0) {
    Status s;
    void* buf = ctx().fusion(off * elem, &s);
    if (buf == nullptr) return s;
    CopyTask t{buf, e.input.data, off};
    HVL_CUDA_CHECK(batched_scale_copy(&t, 1, r.dtype, r.prescale, stream));
    send = buf;
  }
  ncclDataType_t type;
  ncclRedOp_t op;
  nccl_reduce_type(r.dtype, effective_op(r.reduce_op), &type, &op);
  ncclComm_t comm = ctx().comm()->get();
  const bool even = std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
  if (even) {
    if (counts[0] > 0) {
      HVL_NCCL_CHECK(ncclReduceScatter(send, out.data, static_cast<size_t>(counts[0]), type, op, comm, stream));
    }
  } else {
    // Uneven blocks (the first dim0 % size ranks get a row more): one reduce per rank, grouped.
    HVL_NCCL_CHECK(ncclGroupStart());
    Status s;
    for (int i = 0; i < size && s.ok(); ++i) {
      if (counts[i] == 0) continue;
      const void* src = byte_offset(send, displ[i] * static_cast<int64_t>(elem));
      void* dst = i == rank ? out.data : const_cast<void*>(src);  // ignored on the non-root ranks
      s = nccl_status(ncclReduce(src, dst, static_cast<size_t>(counts[i]), type, op, i, comm, stream),
                      "ncclReduce (reducescatter)");
    }
    Status end = nccl_status(ncclGroupEnd(), "ncclGroupEnd");
    HVL_RETURN_IF_ERROR(s);
    HVL_RETURN_IF_ERROR(end);
  }
  HVL_CUDA_CHECK(scale(out.data, counts[rank], r.dtype, effective_postscale(r, size), stream));
  outputs->push_back(OpOutput{out, {}});
  return Status::OK();
}

}  // namespace cuda
}  // namespace horovodlite
