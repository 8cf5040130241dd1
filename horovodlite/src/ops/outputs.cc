#include "ops/outputs.h"

#include <climits>

#include "horovodlite/horovodlite.h"
#include "op_util.h"
#include "world.h"

namespace horovodlite {

OpOutputs outputs_in_place(const std::vector<TensorEntry*>& entries) {
  OpOutputs outputs(entries.size());
  for (size_t i = 0; i < entries.size(); ++i)
    if (entries[i] != nullptr) outputs[i].tensor = entries[i]->output;
  return outputs;
}

std::vector<int64_t> allgather_counts(const Response& r, const Shape& input_shape) {
  const int64_t row = row_elements(input_shape);
  std::vector<int64_t> counts(r.tensor_sizes.size());
  for (size_t i = 0; i < counts.size(); ++i) counts[i] = r.tensor_sizes[i] * row;
  return counts;
}

std::vector<int64_t> reducescatter_counts(const Shape& shape, int size) {
  const int64_t row = row_elements(shape);
  std::vector<int64_t> counts(size);
  for (int i = 0; i < size; ++i) counts[i] = reducescatter_rows(shape[0], size, i) * row;
  return counts;
}

Status exchange_splits(const TensorEntry& e, const World& comm, std::vector<int64_t>* received) {
  received->assign(static_cast<size_t>(comm.size()), 0);
  return comm.alltoall_int64(e.splits.data(), received->data());
}

Status to_int_counts(const std::string& name, const std::vector<int64_t>& counts, std::vector<int>* out,
                     std::vector<int>* displs) {
  out->resize(counts.size());
  displs->resize(counts.size());
  int64_t off = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] > INT_MAX || off > INT_MAX) {
      return Status::InvalidArgument("tensor '" + name +
                                     "' is too large for this collective: MPI counts and offsets "
                                     "are limited to 2^31-1 elements per rank");
    }
    (*out)[i] = static_cast<int>(counts[i]);
    (*displs)[i] = static_cast<int>(off);
    off += counts[i];
  }
  return Status::OK();
}

Status allocate_output(TensorEntry& e, const Shape& shape, const World& comm, Status local, TensorView* out) {
  if (local.ok()) local = e.allocate(shape, out);
  return comm.agree(local, e.request.name, "its output was too large or could not be allocated");
}

}  // namespace horovodlite
