#include "ops/voted_allreduce.h"

#include "enforce.h"
#include "kernels/reduce.h"
#include "op_util.h"
#include "ops/outputs.h"

namespace horovodlite {

namespace {

// An eager allreduce is never fused (fuse_responses keeps it alone).
Status copy_out(const OpArgs& args, int size) {
  const Response& r = args.response;
  HVL_ENFORCE_EQ(r.names.size(), size_t(1), "eager allreduce of '", r.names[0], "' was fused");
  HVL_ENFORCE_EQ(r.tensor_sizes.size(), size_t(1), "eager allreduce of '", r.names[0], "'");
  TensorEntry* e = args.entries.empty() ? nullptr : args.entries[0];
  if (e != nullptr) {
    kernels::scale_copy(e->output.data, r.reduced, r.tensor_sizes[0], r.dtype, effective_postscale(r, size));
  }
  return Status::OK();
}

}  // namespace

OpResult VotedAllreduce::run(const OpArgs& args) {
  return OpResult{copy_out(args, size_), name(), outputs_in_place(args.entries)};
}

}  // namespace horovodlite
