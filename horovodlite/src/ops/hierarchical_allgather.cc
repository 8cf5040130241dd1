#include "ops/hierarchical_allgather.h"

#include <algorithm>
#include <cstring>

#include "logging.h"
#include "ops/fusion.h"
#include "ops/hierarchical_allreduce.h"
#include "transport/collectives.h"

namespace horovodlite {

HierarchicalAllgather::HierarchicalAllgather(const MpiContext& mpi, const Config& config,
                                             std::shared_ptr<FusionBuffer> fusion)
    : MpiAllgather(mpi, std::move(fusion)), config_(config) {
  if (!hierarchical_set_up(mpi, config.hierarchical_allgather,
                           config.autotune && !config.user_set.hierarchical_allgather,
                           "HOROVODLITE_HIERARCHICAL_ALLGATHER", "")) {
    return;
  }
  if (!mpi.uses_mpi()) {
    const Status s = mpi.agree(set_up_transport(), "hierarchical allgather set-up",
                               "splitting the transport failed "
                               "there");
    if (!s.ok()) {
      HVL_LOG(kWarning, "the hierarchical allgather is disabled: " << s.message());
      members_.clear();
      local_wire_.reset();
      cross_wire_.reset();
    }
    return;
  }
  Status s = mpi_status(MPI_Comm_dup(mpi.local_comm(), &local_), "MPI_Comm_dup (local)");
  if (s.ok()) s = mpi_status(MPI_Comm_dup(mpi.cross_comm(), &cross_), "MPI_Comm_dup (cross)");
  // A host's number: the cross rank of its local rank 0 (the cross communicators
  // of different local ranks may order the hosts differently).
  int host = mpi.cross_rank();
  if (s.ok()) s = mpi_status(MPI_Bcast(&host, 1, MPI_INT, 0, local_), "MPI_Bcast (host number)");
  std::vector<int> where(2 * static_cast<size_t>(mpi.size()));
  int mine[2] = {host, mpi.local_rank()};
  if (s.ok()) s = mpi_status(MPI_Allgather(mine, 2, MPI_INT, where.data(), 2, MPI_INT, mpi.comm()), "MPI_Allgather");
  cross_members_.resize(static_cast<size_t>(mpi.cross_size()));
  int me = mpi.rank();
  if (s.ok()) {
    s = mpi_status(MPI_Allgather(&me, 1, MPI_INT, cross_members_.data(), 1, MPI_INT, cross_), "MPI_Allgather (cross)");
  }
  s = mpi.agree(s, "hierarchical allgather set-up", "it failed there");
  if (!s.ok()) {
    HVL_LOG(kWarning, "the hierarchical allgather is disabled: " << s.message());
    return;
  }
  members_.assign(static_cast<size_t>(mpi.cross_size()), std::vector<int>(static_cast<size_t>(mpi.local_size()), -1));
  for (int k = 0; k < mpi.size(); ++k) {
    const int h = where[2 * k], j = where[2 * k + 1];
    if (h < 0 || h >= mpi.cross_size() || j < 0 || j >= mpi.local_size() || members_[h][j] != -1) {
      if (mpi.rank() == 0) HVL_LOG(kWarning, "the hierarchical allgather is disabled: unexpected host layout");
      members_.clear();
      return;
    }
    members_[h][j] = k;
  }
  MPI_Comm_set_errhandler(local_, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(cross_, MPI_ERRORS_RETURN);
  local_rank_ = mpi.local_rank();
}

Status HierarchicalAllgather::set_up_transport() {
  const transport::ContextPtr& wire = mpi_.wire();
  const transport::Topology& topo = wire->topology();
  const int size = wire->size();
  // A host's number: the cross rank of its local rank 0 (as under MPI).
  std::vector<int> leaders;  // the local rank 0 of each host, in cross order
  for (int r = 0; r < size; ++r) {
    if (topo.local_rank(r) == 0) leaders.push_back(r);
  }
  members_.assign(leaders.size(), std::vector<int>(static_cast<size_t>(topo.local_size(0)), -1));
  for (int r = 0; r < size; ++r) {
    const int leader = topo.local_ranks(r).front();
    const size_t h = static_cast<size_t>(std::find(leaders.begin(), leaders.end(), leader) - leaders.begin());
    members_[h][static_cast<size_t>(topo.local_rank(r))] = r;
  }
  cross_members_ = topo.cross_ranks(wire->rank());
  local_rank_ = topo.local_rank(wire->rank());
  HVL_RETURN_IF_ERROR(wire->split(topo.local_ranks(wire->rank()), "hierarchical_allgather/local", &local_wire_));
  return wire->split(cross_members_, "hierarchical_allgather/cross", &cross_wire_);
}

// One step: every member of `group` (whose ranks are global[i]) contributes its
// block of `buf` (counts/displs by global rank); the blocks are gathered in the
// group's rank order into scratch, then copied to their places.
namespace {
Status gather_step(transport::Context& group, const std::vector<int>& global, char* buf, const std::vector<int>& counts,
                   const std::vector<int>& displs, size_t elem, std::vector<char>* scratch) {
  std::vector<size_t> bytes(global.size());
  size_t total = 0;
  for (size_t i = 0; i < global.size(); ++i) {
    bytes[i] = static_cast<size_t>(counts[static_cast<size_t>(global[i])]) * elem;
    total += bytes[i];
  }
  if (scratch->size() < total) scratch->resize(total);
  const int me = global[static_cast<size_t>(group.rank())];
  HVL_RETURN_IF_ERROR(transport_ops::allgatherv(
      group, buf + static_cast<size_t>(displs[static_cast<size_t>(me)]) * elem, scratch->data(), bytes));
  size_t at = 0;
  for (size_t i = 0; i < global.size(); ++i) {
    if (global[i] != me && bytes[i] > 0) {
      std::memcpy(buf + static_cast<size_t>(displs[static_cast<size_t>(global[i])]) * elem, scratch->data() + at,
                  bytes[i]);
    }
    at += bytes[i];
  }
  return Status::OK();
}
}  // namespace

Status HierarchicalAllgather::exchange_transport(void* buf, const std::vector<int>& counts,
                                                 const std::vector<int>& displs, size_t elem) {
  char* out = static_cast<char*>(buf);
  // 1. Across hosts: this rank's block to the ranks of its local rank elsewhere.
  HVL_RETURN_IF_ERROR(gather_step(*cross_wire_, cross_members_, out, counts, displs, elem, &scratch_));
  // 2. Inside the host, once per host: local rank j brings host h's block j
  // (its own, or one that step 1 brought).
  for (const std::vector<int>& host : members_) {
    HVL_RETURN_IF_ERROR(gather_step(*local_wire_, host, out, counts, displs, elem, &scratch_));
  }
  return Status::OK();
}

HierarchicalAllgather::~HierarchicalAllgather() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (local_ != MPI_COMM_NULL) MPI_Comm_free(&local_);
  if (cross_ != MPI_COMM_NULL) MPI_Comm_free(&cross_);
}

bool HierarchicalAllgather::enabled(const Response& r) const {
  if (members_.empty() || r.device != kCpuDevice) return false;
  const int64_t from = hierarchical_from_bytes(config_.hierarchical_allgather, config_.ring_threshold_bytes);
  return from >= 0 && response_bytes(r) >= from;
}

Status HierarchicalAllgather::exchange(const void* send, void* buf, const std::vector<int>& counts,
                                       const std::vector<int>& displs, DataType dtype) {
  const int me = mpi_.rank();
  if (local_wire_ != nullptr) {
    const size_t elem = dtype_size(dtype);
    if (send != nullptr) {
      std::memcpy(static_cast<char*>(buf) + static_cast<int64_t>(displs[me]) * static_cast<int64_t>(elem), send,
                  static_cast<size_t>(counts[me]) * elem);
    }
    return exchange_transport(buf, counts, displs, elem);
  }
  const MPI_Datatype type = MpiContext::move_type(dtype);
  if (send != nullptr) {
    const size_t elem = dtype_size(dtype);
    std::memcpy(static_cast<char*>(buf) + static_cast<int64_t>(displs[me]) * static_cast<int64_t>(elem), send,
                static_cast<size_t>(counts[me]) * elem);
  }
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
