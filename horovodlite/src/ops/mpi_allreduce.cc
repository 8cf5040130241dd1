#include "ops/mpi_allreduce.h"

#include <algorithm>
#include <climits>

namespace horovodlite {

Status MpiAllreduce::run(void* buffer, int64_t count, DataType dtype, ReduceOp op) {
  const size_t elem = dtype_size(dtype);
  char* p = static_cast<char*>(buffer);
  for (int64_t done = 0; done < count;) {
    const int n = static_cast<int>(std::min<int64_t>(count - done, INT_MAX));
    int rc = MPI_Allreduce(MPI_IN_PLACE, p + done * elem, n, mpi_.reduce_type(dtype), mpi_.reduce_op(op, dtype),
                           mpi_.comm());
    HVL_RETURN_IF_ERROR(mpi_status(rc, "MPI_Allreduce"));
    done += n;
  }
  return Status::OK();
}

}  // namespace horovodlite
