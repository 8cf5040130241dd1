#include "ops/ring_segment.h"

#include <algorithm>

#include "mpi_context.h"

namespace horovodlite {

int64_t tcp_eager_limit_bytes() { return mpi_control_variable("btl_tcp_eager_limit"); }

Status ring_segment_bytes(MPI_Comm comm, int64_t configured, bool crosses_hosts, int64_t* out) {
  *out = configured;
  if (!crosses_hosts) return Status::OK();
  // 0 (unknown) on any rank: keep the configured size everywhere.
  int64_t limit = tcp_eager_limit_bytes();
  HVL_MPI_CHECK_AS(MPI_Allreduce(MPI_IN_PLACE, &limit, 1, MPI_INT64_T, MPI_MIN, comm), "MPI_Allreduce (ring segment)");
  if (limit <= 0) return Status::OK();
  const int64_t eager = (limit - 64) / 64 * 64;
  if (eager >= 64) *out = std::min(configured, eager);
  return Status::OK();
}

}  // namespace horovodlite
