#include "cuda/nccl_broadcast.h"

#include "cuda/cuda_status.h"
#include "ops/outputs.h"

namespace horovodlite {
namespace cuda {

Status NcclBroadcast::enqueue(const OpArgs& args, OpOutputs* outputs) {
  const Response& r = args.response;
  TensorEntry& e = *args.entries.at(0);
  const size_t bytes = e.input.byte_size();
  const void* send = ctx().world().rank() == r.root ? e.input.data : e.output.data;
  if (bytes > 0) {
    HVL_NCCL_CHECK(ncclBroadcast(send, e.output.data, bytes, ncclUint8, r.root, ctx().comm()->get(), ctx().stream()));
  }
  *outputs = outputs_in_place(args.entries);
  return Status::OK();
}

}  // namespace cuda
}  // namespace horovodlite
