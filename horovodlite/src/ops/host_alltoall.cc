#include "ops/host_alltoall.h"

#include "op_util.h"
#include "ops/outputs.h"

namespace horovodlite {

Status HostAlltoall::alltoall(const Response& r, TensorEntry& e, OpOutput* output) {
  const int size = world_.size();
  std::vector<int64_t> recv_splits;
  HVL_RETURN_IF_ERROR(exchange_splits(e, world_, &recv_splits));
  const int64_t row = row_elements(e.input.shape);
  std::vector<int64_t> send_counts(size), recv_counts(size);
  int64_t rows = 0;
  for (int i = 0; i < size; ++i) {
    send_counts[i] = e.splits[i] * row;
    recv_counts[i] = recv_splits[i] * row;
    rows += recv_splits[i];
  }
  // Counts differ by rank: a count too large here must fail every rank.
  std::vector<int> sc, sd, rc, rd;
  Status local = to_int_counts(e.request.name, send_counts, &sc, &sd);
  if (local.ok()) local = to_int_counts(e.request.name, recv_counts, &rc, &rd);
  TensorView out;
  HVL_RETURN_IF_ERROR(allocate_output(e, with_dim0(e.input.shape, rows), world_, local, &out));
  HVL_RETURN_IF_ERROR(exchange(e.input.data, sc, sd, out.data, rc, rd, r.dtype));
  output->tensor = out;
  output->received_splits = std::move(recv_splits);
  return Status::OK();
}

}  // namespace horovodlite
