#include "ops/host_allgather.h"

#include <cstring>

#include "enforce.h"
#include "op_util.h"
#include "ops/outputs.h"

namespace horovodlite {

Status HostAllgather::allgather(const Response& r, TensorEntry& e, OpOutput* output) {
  int64_t rows = 0;
  for (int64_t n : r.tensor_sizes) rows += n;
  std::vector<int> counts, displs;
  HVL_RETURN_IF_ERROR(to_int_counts(e.request.name, allgather_counts(r, e.input.shape), &counts, &displs));
  TensorView out;
  HVL_RETURN_IF_ERROR(allocate_output(e, with_dim0(e.input.shape, rows), world_, Status::OK(), &out));
  HVL_RETURN_IF_ERROR(exchange(e.input.data, out.data, counts, displs, r.dtype));
  output->tensor = out;
  return Status::OK();
}

Status HostAllgather::fused(const OpArgs& args, OpOutputs* outputs) {
  const Response& r = args.response;
  const std::vector<TensorEntry*>& entries = args.entries;
  const size_t n = entries.size();
  const int size = world_.size(), me = world_.rank();
  const size_t elem = dtype_size(r.dtype);
  // One size per (tensor, rank), tensor-major (fuse_responses).
  HVL_ENFORCE_EQ(r.tensor_sizes.size(), n * static_cast<size_t>(size), "fused allgather of '", r.names[0], "'");
  auto rows = [&](size_t t, int rank) { return r.tensor_sizes[t * size + rank]; };
  // Elements of rank r's block (its rows of every tensor), and the offset of
  // tensor t's rows inside a block.
  std::vector<int64_t> row(n), block(size, 0), total_rows(n, 0);
  for (size_t t = 0; t < n; ++t) {
    row[t] = row_elements(entries[t]->input.shape);
    for (int k = 0; k < size; ++k) {
      block[k] += rows(t, k) * row[t];
      total_rows[t] += rows(t, k);
    }
  }
  std::vector<int> counts, displs;
  HVL_RETURN_IF_ERROR(to_int_counts(r.names[0], block, &counts, &displs));
  int64_t total = 0;
  for (int64_t b : block) total += b;

  // Every output allocated here, then one agreement for all of them.
  Status local;
  std::vector<TensorView> outs(n);
  for (size_t t = 0; local.ok() && t < n; ++t)
    local = entries[t]->allocate(with_dim0(entries[t]->input.shape, total_rows[t]), &outs[t]);
  char* buf = nullptr;
  if (local.ok()) {
    buf = static_cast<char*>(fusion_->get(std::max<size_t>(static_cast<size_t>(total) * elem, 1)));
    if (buf == nullptr) local = Status::Internal("out of memory allocating the allgather fusion buffer");
  }
  HVL_RETURN_IF_ERROR(world_.agree(local, r.names[0], "its output was too large or could not be allocated"));

  {
    ObservedPhase phase(args.observer, r, "MEMCPY_IN_FUSION_BUFFER");
    char* at = buf + static_cast<int64_t>(displs[me]) * elem;
    for (size_t t = 0; t < n; ++t) {
      const int64_t bytes = rows(t, me) * row[t] * static_cast<int64_t>(elem);
      if (bytes > 0) std::memcpy(at, entries[t]->input.data, static_cast<size_t>(bytes));
      at += bytes;
    }
  }
  {
    ObservedPhase phase(args.observer, r, name());
    HVL_RETURN_IF_ERROR(exchange(nullptr, buf, counts, displs, r.dtype));
  }
  {
    ObservedPhase phase(args.observer, r, "MEMCPY_OUT_FUSION_BUFFER");
    std::vector<int64_t> written(n, 0);  // bytes of each output filled so far
    for (int k = 0; k < size; ++k) {
      const char* at = buf + static_cast<int64_t>(displs[k]) * elem;
      for (size_t t = 0; t < n; ++t) {
        const int64_t bytes = rows(t, k) * row[t] * static_cast<int64_t>(elem);
        if (bytes > 0) std::memcpy(static_cast<char*>(outs[t].data) + written[t], at, static_cast<size_t>(bytes));
        written[t] += bytes;
        at += bytes;
      }
    }
  }
  for (size_t t = 0; t < n; ++t) (*outputs)[t].tensor = outs[t];
  return Status::OK();
}

}  // namespace horovodlite
