#include "ops/host_reducescatter.h"

#include <algorithm>

#include "horovodlite/horovodlite.h"
#include "kernels/reduce.h"
#include "op_util.h"
#include "ops/outputs.h"

namespace horovodlite {

Status HostReducescatter::reducescatter(const Response& r, TensorEntry& e, OpOutput* output) {
  const int size = world_.size();
  const Shape& shape = e.input.shape;
  const int64_t total = e.input.num_elements();
  const size_t elem = dtype_size(r.dtype);
  const std::vector<int64_t> counts = reducescatter_counts(shape, size);
  std::vector<int> icounts, displs;
  HVL_RETURN_IF_ERROR(to_int_counts(e.request.name, counts, &icounts, &displs));
  TensorView out;
  HVL_RETURN_IF_ERROR(allocate_output(e, with_dim0(shape, reducescatter_rows(shape[0], size, world_.rank())), world_,
                                      Status::OK(), &out));
  char* tmp = static_cast<char*>(fusion_->get(std::max<size_t>(total * elem, 1)));
  if (tmp == nullptr) return Status::Internal("out of memory allocating a reducescatter buffer");
  kernels::scale_copy(tmp, e.input.data, total, r.dtype, r.prescale);
  HVL_RETURN_IF_ERROR(reduce_scatter(tmp, out.data, icounts, r.dtype, effective_op(r.reduce_op)));
  const double post = effective_postscale(r, size);
  if (post != 1.0) kernels::scale(out.data, counts[world_.rank()], r.dtype, post);
  output->tensor = out;
  return Status::OK();
}

}  // namespace horovodlite

namespace horovodlite {

Status HostReducescatter::fused(const OpArgs& args, OpOutputs* outputs) {
  const Response& r = args.response;
  const std::vector<TensorEntry*>& entries = args.entries;
  const size_t n = entries.size();
  const int size = world_.size(), me = world_.rank();
  const size_t elem = dtype_size(r.dtype);
  // counts[t][k]: elements of tensor t's block for rank k; block[k]: rank k's
  // block of the fused buffer (its rows of every tensor).
  std::vector<std::vector<int64_t>> counts(n);
  std::vector<int64_t> block(size, 0);
  int64_t total = 0;
  for (size_t t = 0; t < n; ++t) {
    counts[t] = reducescatter_counts(entries[t]->input.shape, size);
    for (int k = 0; k < size; ++k) block[k] += counts[t][k];
    total += entries[t]->input.num_elements();
  }
  std::vector<int> icounts, displs;
  HVL_RETURN_IF_ERROR(to_int_counts(r.names[0], block, &icounts, &displs));

  Status local;
  std::vector<TensorView> outs(n);
  for (size_t t = 0; local.ok() && t < n; ++t) {
    const Shape& shape = entries[t]->input.shape;
    local = entries[t]->allocate(with_dim0(shape, reducescatter_rows(shape[0], size, me)), &outs[t]);
  }
  // The packed input, then this rank's reduced block.
  char* buf = nullptr;
  if (local.ok()) {
    buf = static_cast<char*>(fusion_->get(std::max<size_t>(static_cast<size_t>(total + block[me]) * elem, 1)));
    if (buf == nullptr) local = Status::Internal("out of memory allocating the reducescatter fusion buffer");
  }
  HVL_RETURN_IF_ERROR(world_.agree(local, r.names[0], "its output was too large or could not be allocated"));
  char* result = buf + total * static_cast<int64_t>(elem);

  {
    ObservedPhase phase(args.observer, r, "MEMCPY_IN_FUSION_BUFFER");
    std::vector<int64_t> read(n, 0);  // elements of each input packed so far
    char* at = buf;
    for (int k = 0; k < size; ++k) {
      for (size_t t = 0; t < n; ++t) {
        const int64_t c = counts[t][k];
        kernels::scale_copy(at, static_cast<const char*>(entries[t]->input.data) + read[t] * static_cast<int64_t>(elem),
                            c, r.dtype, r.prescale);
        read[t] += c;
        at += c * static_cast<int64_t>(elem);
      }
    }
  }
  {
    ObservedPhase phase(args.observer, r, name());
    HVL_RETURN_IF_ERROR(reduce_scatter(buf, result, icounts, r.dtype, effective_op(r.reduce_op)));
  }
  {
    ObservedPhase phase(args.observer, r, "MEMCPY_OUT_FUSION_BUFFER");
    const double post = effective_postscale(r, size);
    const char* at = result;
    for (size_t t = 0; t < n; ++t) {
      const int64_t c = counts[t][me];
      kernels::scale_copy(outs[t].data, at, c, r.dtype, post);
      at += c * static_cast<int64_t>(elem);
    }
  }
  for (size_t t = 0; t < n; ++t) (*outputs)[t].tensor = outs[t];
  return Status::OK();
}

}  // namespace horovodlite
