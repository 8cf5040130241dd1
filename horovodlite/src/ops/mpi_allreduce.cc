#include "ops/mpi_allreduce.h"

#include <algorithm>
#include <climits>

#include "kernels/reduce.h"

namespace horovodlite {

Status MpiAllreduce::reduce(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op, double postscale) {
  const size_t elem = dtype_size(dtype);
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  for (int64_t done = 0; done < count;) {
    const int n = static_cast<int>(std::min<int64_t>(count - done, INT_MAX));
    HVL_MPI_CHECK(MPI_Allreduce(src == dst ? MPI_IN_PLACE : src + done * elem, dst + done * elem, n,
                                mpi_.reduce_type(dtype), mpi_.reduce_op(op, dtype), mpi_.comm()));
    done += n;
  }
  kernels::scale(out, count, dtype, postscale);
  return Status::OK();
}

}  // namespace horovodlite
