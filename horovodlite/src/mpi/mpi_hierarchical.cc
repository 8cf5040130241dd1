#include "mpi/mpi_hierarchical.h"

#include <algorithm>

#include "logging.h"
#include "mpi/mpi_transport.h"
#include "mpi/ring_segment.h"

namespace horovodlite {

namespace {

// A duplicate of `comm` whose errors come back as codes.
Status dup_comm(MPI_Comm comm, const char* what, MPI_Comm* out) {
  HVL_MPI_CHECK_AS(MPI_Comm_dup(comm, out), what);
  MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
  return Status::OK();
}

void free_comm(MPI_Comm* comm) {
  if (*comm != MPI_COMM_NULL && mpi_running()) MPI_Comm_free(comm);
  *comm = MPI_COMM_NULL;
}

}  // namespace

MpiHierarchicalAllreduce::MpiHierarchicalAllreduce(const World& world, const Config& config,
                                                   std::shared_ptr<FusionBuffer> fusion)
    : HierarchicalAllreduce(world, config, std::move(fusion), OwnSetUp{}), comms_(*world.mpi()) {
  if (!applies()) return;
  const Status s = set_up(config);
  if (!s.ok()) {
    HVL_LOG(kWarning, "the hierarchical allreduce is disabled: " << s.message());
    ring_.reset();
    free_comm(&local_);
  }
}

Status MpiHierarchicalAllreduce::set_up(const Config& config) {
  // Every step is agreed on before the next collective: a rank that failed
  // must not leave the others waiting in it.
  MPI_Comm cross = MPI_COMM_NULL;
  Status dup = dup_comm(comms_.local_comm(), "MPI_Comm_dup (local)", &local_);
  if (dup.ok()) dup = dup_comm(comms_.cross_comm(), "MPI_Comm_dup (cross)", &cross);
  std::shared_ptr<transport::MpiTransport> cross_wire;
  if (cross != MPI_COMM_NULL) cross_wire = std::make_shared<transport::MpiTransport>(cross, true);  // frees cross
  HVL_RETURN_IF_ERROR(world_.agree(dup, "hierarchical allreduce set-up", "MPI_Comm_dup failed there"));
  // The ring crosses hosts: segments that go eagerly (mpi/ring_segment.h).
  int64_t segment = config.ring_segment_bytes;
  Status seg = ring_segment_bytes(cross, config.ring_segment_bytes, true, &segment);
  HVL_RETURN_IF_ERROR(world_.agree(seg, "hierarchical allreduce set-up", "choosing its segment size failed there"));
  local_rank_ = comms_.local_rank();
  local_size_ = comms_.local_size();
  if (segment != config.ring_segment_bytes && comms_.rank() == 0) {
    HVL_LOG(kDebug, "the hierarchical allreduce's ring crosses hosts: "
                        << segment << "-byte segments (under btl_tcp_eager_limit)");
  }
  RingAllreduceOptions options;
  options.segment_bytes = segment;
  ring_ = std::make_unique<RingAllreduce>(std::move(cross_wire), options);
  return Status::OK();
}

MpiHierarchicalAllreduce::~MpiHierarchicalAllreduce() {
  ring_.reset();
  free_comm(&local_);
}

Status MpiHierarchicalAllreduce::run_pieces(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op,
                                            double postscale, bool compressed, DataType half_type) {
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const int64_t piece = std::max<int64_t>(local_size_, piece_bytes_ / esize);
  const int64_t pieces = (count + piece - 1) / piece;
  HVL_RETURN_IF_ERROR(ensure_scratch((std::min(piece, count) + local_size_ - 1) / local_size_ * esize));
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  const MPI_Datatype rtype = comms_.reduce_type(dtype);
  const MPI_Op rop = comms_.reduce_op(op, dtype);
  const MPI_Datatype mtype = mpi::Comms::move_type(dtype);
  std::vector<int> counts[2], displs[2];  // per parity: in use by a piece's non-blocking collective
  MPI_Request rs = MPI_REQUEST_NULL, ag = MPI_REQUEST_NULL;

  auto start_reduce_scatter = [&](int64_t p) {
    const int b = static_cast<int>(p % 2);
    split_evenly(std::min(piece, count - p * piece), local_size_, &counts[b], &displs[b]);
    return mpi_status(
        MPI_Ireduce_scatter(src + p * piece * esize, scratch_[b].data(), counts[b].data(), rtype, rop, local_, &rs),
        "MPI_Ireduce_scatter (inside the host)");
  };
  HVL_RETURN_IF_ERROR(start_reduce_scatter(0));
  for (int64_t p = 0; p < pieces; ++p) {
    const int b = static_cast<int>(p % 2);
    HVL_RETURN_IF_ERROR(mpi_wait(&rs, "MPI_Ireduce_scatter (inside the host)"));
    // The allgather of piece p-1 reads scratch_[(p+1) % 2]: done before it is reused.
    HVL_RETURN_IF_ERROR(mpi_wait(&ag, "MPI_Iallgatherv (inside the host)"));
    if (p + 1 < pieces) HVL_RETURN_IF_ERROR(start_reduce_scatter(p + 1));
    void* shard = scratch_[b].data();
    const int n = counts[b][local_rank_];
    HVL_RETURN_IF_ERROR(compressed ? ring_->run_16bit_wire(shard, shard, n, dtype, op, postscale, half_type)
                                   : ring_->run(shard, shard, n, dtype, op, postscale));
    HVL_RETURN_IF_ERROR(mpi_status(MPI_Iallgatherv(shard, n, mtype, dst + p * piece * esize, counts[b].data(),
                                                   displs[b].data(), mtype, local_, &ag),
                                   "MPI_Iallgatherv (inside the host)"));
  }
  return mpi_wait(&ag, "MPI_Iallgatherv (inside the host)");
}

MpiHierarchicalAllgather::MpiHierarchicalAllgather(const World& world, const Config& config,
                                                   std::shared_ptr<FusionBuffer> fusion)
    : HierarchicalAllgather(world, config, std::move(fusion), OwnSetUp{}) {
  if (!layout_known()) return;
  const mpi::Comms& comms = *world.mpi();
  Status s = dup_comm(comms.local_comm(), "MPI_Comm_dup (local)", &local_);
  if (s.ok()) s = dup_comm(comms.cross_comm(), "MPI_Comm_dup (cross)", &cross_);
  s = world.agree(s, "hierarchical allgather set-up", "it failed there");
  if (!s.ok()) {
    HVL_LOG(kWarning, "the hierarchical allgather is disabled: " << s.message());
    forget_layout();
    free_comm(&local_);
    free_comm(&cross_);
  }
}

MpiHierarchicalAllgather::~MpiHierarchicalAllgather() {
  free_comm(&local_);
  free_comm(&cross_);
}

Status MpiHierarchicalAllgather::exchange(const void* send, void* buf, const std::vector<int>& counts,
                                          const std::vector<int>& displs, DataType dtype) {
  place_own_block(send, buf, counts, displs, dtype_size(dtype));
  const MPI_Datatype type = mpi::Comms::move_type(dtype);
  const size_t hosts = members_.size(), local = members_[0].size();
  std::vector<int> c(std::max(hosts, local)), d(c.size());
  // 1. Across hosts: local rank j of every host gathers the blocks of local rank j.
  for (size_t q = 0; q < hosts; ++q) {
    c[q] = counts[cross_members_[q]];
    d[q] = displs[cross_members_[q]];
  }
  HVL_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, type, buf, c.data(), d.data(), type, cross_));
  // 2. Inside the host, one allgather per host: local rank j holds host h's block j.
  for (size_t h = 0; h < hosts; ++h) {
    for (size_t j = 0; j < local; ++j) {
      c[j] = counts[members_[h][j]];
      d[j] = displs[members_[h][j]];
    }
    HVL_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, type, buf, c.data(), d.data(), type, local_));
  }
  return Status::OK();
}

}  // namespace horovodlite
