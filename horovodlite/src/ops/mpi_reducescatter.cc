#include "ops/mpi_reducescatter.h"

#include <algorithm>

#include "horovodlite/horovodlite.h"
#include "kernels/reduce.h"
#include "op_util.h"
#include "ops/outputs.h"

namespace horovodlite {

Status MpiReducescatter::reducescatter(const Response& r, TensorEntry& e) {
  const int size = mpi_.size();
  const Shape& shape = e.input.shape;
  const int64_t total = e.input.num_elements();
  const size_t elem = dtype_size(r.dtype);
  const std::vector<int64_t> counts = reducescatter_counts(shape, size);
  std::vector<int> icounts, displs;
  HVL_RETURN_IF_ERROR(to_int_counts(e.request.name, counts, &icounts, &displs));
  TensorView out;
  HVL_RETURN_IF_ERROR(allocate_output(e, with_dim0(shape, reducescatter_rows(shape[0], size, mpi_.rank())), mpi_.comm(),
                                      Status::OK(), &out));
  char* tmp = static_cast<char*>(fusion_->get(std::max<size_t>(total * elem, 1)));
  if (tmp == nullptr) return Status::Internal("out of memory allocating a reducescatter buffer");
  kernels::scale_copy(tmp, e.input.data, total, r.dtype, r.prescale);
  HVL_MPI_CHECK(MPI_Reduce_scatter(tmp, out.data, icounts.data(), mpi_.reduce_type(r.dtype),
                                   mpi_.reduce_op(effective_op(r.reduce_op), r.dtype), mpi_.comm()));
  const double post = effective_postscale(r, size);
  if (post != 1.0) kernels::scale(out.data, counts[mpi_.rank()], r.dtype, post);
  e.handle->set_output(out);
  return Status::OK();
}

}  // namespace horovodlite
