#include "ops/hierarchical_allreduce.h"

#include <algorithm>

#include "logging.h"
#include "ops/ring_segment.h"
#include "transport/collectives.h"

namespace horovodlite {

namespace {

// Elements of [0, n) per local rank, as even as possible, and their offsets.
void split(int64_t n, int parts, std::vector<int>* counts, std::vector<int>* displs) {
  counts->resize(parts);
  displs->resize(parts);
  int offset = 0;
  for (int i = 0; i < parts; ++i) {
    (*counts)[i] = static_cast<int>(n / parts + (i < n % parts ? 1 : 0));
    (*displs)[i] = offset;
    offset += (*counts)[i];
  }
}

}  // namespace

bool hierarchical_set_up(const MpiContext& mpi, Config::Hierarchical mode, bool tunable, const char* variable,
                         const char* instead) {
  if ((mode == Config::Hierarchical::kOff && !tunable) || mpi.size() < 2) return false;
  bool alike = false, same_count = false;
  if (!mpi.several_hosts_alike(&alike, &same_count).ok()) return false;
  if (!alike && mode == Config::Hierarchical::kOn && mpi.rank() == 0) {
    HVL_LOG(kInfo, variable << "=1 has no effect here ("
                            << (same_count ? "one host, or one rank per host" : "hosts have different numbers of ranks")
                            << ")" << instead);
  }
  return alike;
}

int64_t hierarchical_from_bytes(Config::Hierarchical mode, int64_t ring_threshold_bytes) {
  switch (mode) {
    case Config::Hierarchical::kOn:
      return 0;
    case Config::Hierarchical::kAuto:
      return ring_threshold_bytes < 0 ? -1 : ring_threshold_bytes;  // RING_THRESHOLD=-1: never
    default:
      return -1;
  }
}

HierarchicalAllreduce::HierarchicalAllreduce(const MpiContext& mpi, const Config& config,
                                             std::shared_ptr<FusionBuffer> fusion)
    : HostAllreduce(mpi, std::move(fusion)), config_(config) {
  if (!hierarchical_set_up(mpi, config.hierarchical_allreduce,
                           config.autotune && !config.user_set.hierarchical_allreduce,
                           "HOROVODLITE_HIERARCHICAL_ALLREDUCE", ": the flat ring serves large allreduces")) {
    return;
  }
  if (!mpi.uses_mpi()) {
    const Status s = mpi.agree(set_up_transport(config), "hierarchical allreduce set-up",
                               "splitting the transport "
                               "failed there");
    if (!s.ok()) {
      HVL_LOG(kWarning, "the hierarchical allreduce is disabled: " << s.message());
      local_wire_.reset();
      ring_.reset();
    }
    return;
  }
  Status dup = mpi_status(MPI_Comm_dup(mpi.local_comm(), &local_), "MPI_Comm_dup (local)");
  if (dup.ok()) dup = mpi_status(MPI_Comm_dup(mpi.cross_comm(), &cross_), "MPI_Comm_dup (cross)");
  dup = mpi.agree(dup, "hierarchical allreduce set-up", "MPI_Comm_dup failed there");
  if (!dup.ok()) {
    HVL_LOG(kWarning, "the hierarchical allreduce is disabled: " << dup.message());
    return;
  }
  // The ring crosses hosts: segments that go eagerly (ops/ring_segment.h).
  int64_t segment = config.ring_segment_bytes;
  Status seg = ring_segment_bytes(cross_, config.ring_segment_bytes, true, &segment);
  seg = mpi.agree(seg, "hierarchical allreduce set-up", "choosing its segment size failed there");
  if (!seg.ok()) {
    HVL_LOG(kWarning, "the hierarchical allreduce is disabled: " << seg.message());
    return;
  }
  MPI_Comm_set_errhandler(local_, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(cross_, MPI_ERRORS_RETURN);
  local_rank_ = mpi.local_rank();
  local_size_ = mpi.local_size();
  if (segment != config.ring_segment_bytes && mpi.rank() == 0) {
    HVL_LOG(kDebug, "the hierarchical allreduce's ring crosses hosts: "
                        << segment << "-byte segments (under btl_tcp_eager_limit)");
  }
  RingAllreduceOptions options;
  options.segment_bytes = segment;
  ring_ = std::make_unique<RingAllreduce>(cross_, options);
}

Status HierarchicalAllreduce::set_up_transport(const Config& config) {
  const transport::ContextPtr& wire = mpi_.wire();
  const transport::Topology& topology = wire->topology();
  transport::ContextPtr cross;
  HVL_RETURN_IF_ERROR(wire->split(topology.local_ranks(wire->rank()), "hierarchical_allreduce/local", &local_wire_));
  HVL_RETURN_IF_ERROR(wire->split(topology.cross_ranks(wire->rank()), "hierarchical_allreduce/cross", &cross));
  local_rank_ = local_wire_->rank();
  local_size_ = local_wire_->size();
  RingAllreduceOptions options;
  options.segment_bytes = config.ring_segment_bytes;
  ring_ = std::make_unique<RingAllreduce>(std::move(cross), options);
  return Status::OK();
}

HierarchicalAllreduce::~HierarchicalAllreduce() {
  ring_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (local_ != MPI_COMM_NULL) MPI_Comm_free(&local_);
  if (cross_ != MPI_COMM_NULL) MPI_Comm_free(&cross_);
}

bool HierarchicalAllreduce::accepts(DataType, ReduceOp op, int64_t bytes) const {
  if (ring_ == nullptr || op == ReduceOp::kAdasum) return false;
  const int64_t from = hierarchical_from_bytes(config_.hierarchical_allreduce, config_.ring_threshold_bytes);
  return from >= 0 && bytes >= from;
}

Status HierarchicalAllreduce::reduce(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op,
                                     double postscale) {
  return run(in, out, count, dtype, op, postscale, false);
}

Status HierarchicalAllreduce::reduce_fp16_wire(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op,
                                               double postscale) {
  return run(in, out, count, dtype, op, postscale, true);
}

Status HierarchicalAllreduce::ensure_scratch(int64_t bytes) {
  for (auto& s : scratch_) {
    if (static_cast<int64_t>(s.size()) < bytes) {
      try {
        s.resize(static_cast<size_t>(bytes));
      } catch (const std::bad_alloc&) {
        return Status::Internal("out of memory allocating " + std::to_string(bytes) +
                                " bytes for the hierarchical allreduce");
      }
    }
  }
  return Status::OK();
}

Status HierarchicalAllreduce::run(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op,
                                  double postscale, bool wire16) {
  if (ring_ == nullptr) return Status::Internal("the hierarchical allreduce is not set up on this job");
  if (count <= 0) return Status::OK();
  if (local_wire_ != nullptr) return run_transport(in, out, count, dtype, op, postscale, wire16);
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const int64_t piece = std::max<int64_t>(local_size_, piece_bytes_ / esize);
  const int64_t pieces = (count + piece - 1) / piece;
  HVL_RETURN_IF_ERROR(ensure_scratch((std::min(piece, count) + local_size_ - 1) / local_size_ * esize));
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  const MPI_Datatype rtype = mpi_.reduce_type(dtype);
  const MPI_Op rop = mpi_.reduce_op(op, dtype);
  const MPI_Datatype mtype = MpiContext::move_type(dtype);
  std::vector<int> counts[2], displs[2];  // per parity: in use by a piece's non-blocking collective
  MPI_Request rs = MPI_REQUEST_NULL, ag = MPI_REQUEST_NULL;

  auto start_reduce_scatter = [&](int64_t p) {
    const int b = static_cast<int>(p % 2);
    split(std::min(piece, count - p * piece), local_size_, &counts[b], &displs[b]);
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
    HVL_RETURN_IF_ERROR(wire16 ? ring_->run_fp16_wire(shard, shard, n, dtype, op, postscale)
                               : ring_->run(shard, shard, n, dtype, op, postscale));
    HVL_RETURN_IF_ERROR(mpi_status(MPI_Iallgatherv(shard, n, mtype, dst + p * piece * esize, counts[b].data(),
                                                   displs[b].data(), mtype, local_, &ag),
                                   "MPI_Iallgatherv (inside the host)"));
  }
  return mpi_wait(&ag, "MPI_Iallgatherv (inside the host)");
}

Status HierarchicalAllreduce::run_transport(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op,
                                            double postscale, bool wire16) {
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const int64_t piece = std::max<int64_t>(local_size_, piece_bytes_ / esize);
  HVL_RETURN_IF_ERROR(ensure_scratch((std::min(piece, count) + local_size_ - 1) / local_size_ * esize));
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  std::vector<int> counts, displs;
  std::vector<int64_t> elements(static_cast<size_t>(local_size_));
  std::vector<size_t> bytes(static_cast<size_t>(local_size_));
  for (int64_t first = 0; first < count; first += piece) {
    split(std::min(piece, count - first), local_size_, &counts, &displs);
    for (int i = 0; i < local_size_; ++i) {
      elements[static_cast<size_t>(i)] = counts[static_cast<size_t>(i)];
      bytes[static_cast<size_t>(i)] = static_cast<size_t>(counts[static_cast<size_t>(i)] * esize);
    }
    void* shard = scratch_[0].data();
    const int n = counts[static_cast<size_t>(local_rank_)];
    HVL_RETURN_IF_ERROR(transport_ops::reducescatter(*local_wire_, src + first * esize, shard, elements, dtype, op));
    HVL_RETURN_IF_ERROR(wire16 ? ring_->run_fp16_wire(shard, shard, n, dtype, op, postscale)
                               : ring_->run(shard, shard, n, dtype, op, postscale));
    HVL_RETURN_IF_ERROR(transport_ops::allgatherv(*local_wire_, shard, dst + first * esize, bytes));
  }
  return Status::OK();
}

}  // namespace horovodlite
