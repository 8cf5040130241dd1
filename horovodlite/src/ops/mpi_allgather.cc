#include "ops/mpi_allgather.h"

#include "op_util.h"
#include "ops/outputs.h"

namespace horovodlite {

Status MpiAllgather::allgather(const Response& r, TensorEntry& e) {
  int64_t rows = 0;
  for (int64_t n : r.tensor_sizes) rows += n;
  std::vector<int> counts, displs;
  HVL_RETURN_IF_ERROR(to_int_counts(e.request.name, allgather_counts(r, e.input.shape), &counts, &displs));
  TensorView out;
  HVL_RETURN_IF_ERROR(allocate_output(e, with_dim0(e.input.shape, rows), mpi_.comm(), Status::OK(), &out));
  MPI_Datatype t = MpiContext::move_type(r.dtype);
  HVL_MPI_CHECK(
      MPI_Allgatherv(e.input.data, counts[mpi_.rank()], t, out.data, counts.data(), displs.data(), t, mpi_.comm()));
  e.handle->set_output(out);
  return Status::OK();
}

}  // namespace horovodlite
