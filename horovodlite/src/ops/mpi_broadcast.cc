#include "ops/mpi_broadcast.h"

#include <algorithm>
#include <climits>
#include <cstring>

namespace horovodlite {

Status MpiBroadcast::broadcast(const Response& r, TensorEntry& e) {
  const size_t elem = dtype_size(r.dtype);
  const int64_t count = e.input.num_elements();
  char* data = static_cast<char*>(e.output.data);
  if (mpi_.rank() == r.root && e.output.data != e.input.data && count > 0) {
    std::memcpy(e.output.data, e.input.data, count * elem);
  }
  HVL_RETURN_IF_ERROR(bcast(data, count, r.dtype, r.root));
  return Status::OK();
}

Status MpiBroadcast::bcast(void* data, int64_t count, DataType dtype, int root) {
  const size_t elem = dtype_size(dtype);
  for (int64_t done = 0; done < count;) {
    const int n = static_cast<int>(std::min<int64_t>(count - done, INT_MAX));
    HVL_MPI_CHECK(
        MPI_Bcast(static_cast<char*>(data) + done * elem, n, MpiContext::move_type(dtype), root, mpi_.comm()));
    done += n;
  }
  return Status::OK();
}

}  // namespace horovodlite
