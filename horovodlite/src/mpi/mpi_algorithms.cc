#include "mpi/mpi_algorithms.h"

#include <algorithm>
#include <climits>

#include "kernels/reduce.h"

namespace horovodlite {

using mpi::Comms;

Status MpiAllreduce::reduce(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op, double postscale) {
  const size_t elem = dtype_size(dtype);
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  for (int64_t done = 0; done < count;) {
    const int n = static_cast<int>(std::min<int64_t>(count - done, INT_MAX));
    HVL_MPI_CHECK(MPI_Allreduce(src == dst ? MPI_IN_PLACE : src + done * elem, dst + done * elem, n,
                                comms_.reduce_type(dtype), comms_.reduce_op(op, dtype), comms_.comm()));
    done += n;
  }
  kernels::scale(out, count, dtype, postscale);
  return Status::OK();
}

Status MpiAllgather::exchange(const void* send, void* buf, const std::vector<int>& counts,
                              const std::vector<int>& displs, DataType dtype) {
  const MPI_Datatype type = Comms::move_type(dtype);
  HVL_MPI_CHECK(MPI_Allgatherv(send ? send : MPI_IN_PLACE, send ? counts[world_.rank()] : 0, type, buf, counts.data(),
                               displs.data(), type, comms_.comm()));
  return Status::OK();
}

Status MpiBroadcast::bcast(void* data, int64_t count, DataType dtype, int root) {
  const size_t elem = dtype_size(dtype);
  for (int64_t done = 0; done < count;) {
    const int n = static_cast<int>(std::min<int64_t>(count - done, INT_MAX));
    HVL_MPI_CHECK(MPI_Bcast(static_cast<char*>(data) + done * elem, n, Comms::move_type(dtype), root, comms_.comm()));
    done += n;
  }
  return Status::OK();
}

Status MpiAlltoall::exchange(const void* in, const std::vector<int>& sc, const std::vector<int>& sd, void* out,
                             const std::vector<int>& rc, const std::vector<int>& rd, DataType dtype) {
  MPI_Datatype t = Comms::move_type(dtype);
  HVL_MPI_CHECK(MPI_Alltoallv(in, sc.data(), sd.data(), t, out, rc.data(), rd.data(), t, comms_.comm()));
  return Status::OK();
}

Status MpiReducescatter::reduce_scatter(const void* in, void* out, const std::vector<int>& counts, DataType dtype,
                                        ReduceOp op) {
  HVL_MPI_CHECK(MPI_Reduce_scatter(in, out, counts.data(), comms_.reduce_type(dtype), comms_.reduce_op(op, dtype),
                                   comms_.comm()));
  return Status::OK();
}

}  // namespace horovodlite
