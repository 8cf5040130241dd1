#include "ops/voted_allreduce.h"

#include "kernels/reduce.h"
#include "op_util.h"

namespace horovodlite {

OpResult VotedAllreduce::run(const OpArgs& args) {
  const Response& r = args.response;
  if (r.names.size() != 1 || r.tensor_sizes.size() != 1) {
    return OpResult{Status::Internal("VotedAllreduce: an eager allreduce of '" + r.names[0] + "' was fused")};
  }
  TensorEntry* e = args.entries.empty() ? nullptr : args.entries[0];
  if (e != nullptr) {
    kernels::scale_copy(e->output.data, r.reduced, r.tensor_sizes[0], r.dtype, effective_postscale(r, size_));
    e->handle->set_output(e->output);
  }
  return OpResult{Status::OK(), name()};
}

}  // namespace horovodlite
