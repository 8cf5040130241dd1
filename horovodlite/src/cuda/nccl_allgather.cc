#include "cuda/nccl_allgather.h"

#include <algorithm>

#include "cuda/cuda_status.h"
#include "op_util.h"
#include "ops/outputs.h"

namespace horovodlite {
namespace cuda {

Status NcclAllgather::enqueue(const OpArgs& args, OpOutputs* outputs) {
  const Response& r = args.response;
  TensorEntry& e = *args.entries.at(0);
  const int size = ctx().world().size(), rank = ctx().world().rank();
  const std::vector<int64_t> counts = allgather_counts(r, e.input.shape);
  const size_t elem = dtype_size(r.dtype);
  std::vector<size_t> bytes(size), displ(size);
  int64_t rows = 0;
  size_t off = 0;
  for (int i = 0; i < size; ++i) {
    bytes[i] = static_cast<size_t>(counts[i]) * elem;
    displ[i] = off;
    off += bytes[i];
    rows += r.tensor_sizes[i];
  }
  TensorView out;
  HVL_RETURN_IF_ERROR(allocate_output(e, with_dim0(e.input.shape, rows), ctx().world(), Status::OK(), &out));
  HVL_RETURN_IF_ERROR(ctx().wait_ready({&e}));  // the allocator may have re-recorded the ready event
  const bool even = std::all_of(bytes.begin(), bytes.end(), [&](size_t b) { return b == bytes[0]; });
  ncclComm_t comm = ctx().comm()->get();
  cudaStream_t stream = ctx().stream();
  if (even) {
    if (bytes[0] > 0) HVL_NCCL_CHECK(ncclAllGather(e.input.data, out.data, bytes[0], ncclUint8, comm, stream));
  } else {
    // Uneven dim 0: one broadcast per rank into its slice of the output, grouped.
    HVL_NCCL_CHECK(ncclGroupStart());
    Status s;
    for (int i = 0; i < size && s.ok(); ++i) {
      if (bytes[i] == 0) continue;
      const void* send = i == rank ? e.input.data : byte_offset(out.data, displ[i]);
      s = nccl_status(ncclBroadcast(send, byte_offset(out.data, displ[i]), bytes[i], ncclUint8, i, comm, stream),
                      "ncclBroadcast (allgather)");
    }
    Status end = nccl_status(ncclGroupEnd(), "ncclGroupEnd");
    HVL_RETURN_IF_ERROR(s);
    HVL_RETURN_IF_ERROR(end);
  }
  outputs->push_back(OpOutput{out, {}});
  return Status::OK();
}

}  // namespace cuda
}  // namespace horovodlite
