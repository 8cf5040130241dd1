#include "mpi/ring_segment.h"

#include <algorithm>

#include "logging.h"
#include "mpi/mpi_util.h"
#include "mpi/mpi_world.h"

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

Status mpi_ring_options(const World& world, const Config& config, RingAllreduceOptions* out) {
  // A host holding every rank holds every rank everywhere: all ranks agree on crossing.
  int64_t segment = config.ring_segment_bytes;
  Status seg = ring_segment_bytes(world.mpi()->host_comm(), config.ring_segment_bytes,
                                  world.local_size() < world.size(), &segment);
  HVL_RETURN_IF_ERROR(world.agree(seg, "ring allreduce set-up", "choosing its segment size failed there"));
  if (segment != config.ring_segment_bytes && world.rank() == 0) {
    HVL_LOG(kDebug, "the ring crosses hosts: " << segment << "-byte segments (under btl_tcp_eager_limit)");
  }
  out->segment_bytes = segment;
  return Status::OK();
}

}  // namespace horovodlite
