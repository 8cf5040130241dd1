#include "ops/host_broadcast.h"

#include <cstring>

namespace horovodlite {

Status HostBroadcast::broadcast(const Response& r, TensorEntry& e) {
  const size_t elem = dtype_size(r.dtype);
  const int64_t count = e.input.num_elements();
  char* data = static_cast<char*>(e.output.data);
  if (world_.rank() == r.root && e.output.data != e.input.data && count > 0) {
    std::memcpy(e.output.data, e.input.data, count * elem);
  }
  HVL_RETURN_IF_ERROR(bcast(data, count, r.dtype, r.root));
  return Status::OK();
}

}  // namespace horovodlite
