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
  for (int64_t done = 0; done < count;) {
    const int n = static_cast<int>(std::min<int64_t>(count - done, INT_MAX));
    HVL_MPI_CHECK(MPI_Bcast(data + done * elem, n, MpiContext::move_type(r.dtype), r.root, mpi_.comm()));
    done += n;
  }
  return Status::OK();
}

}  // namespace horovodlite
