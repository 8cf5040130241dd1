#include "ops/hierarchical_allreduce.h"

#include <algorithm>

#include "logging.h"
#include "transport/collectives.h"

namespace horovodlite {

void split_evenly(int64_t n, int parts, std::vector<int>* counts, std::vector<int>* displs) {
  counts->resize(parts);
  displs->resize(parts);
  int offset = 0;
  for (int i = 0; i < parts; ++i) {
    (*counts)[i] = static_cast<int>(n / parts + (i < n % parts ? 1 : 0));
    (*displs)[i] = offset;
    offset += (*counts)[i];
  }
}

bool hierarchical_set_up(const World& world, Config::Hierarchical mode, bool tunable, const char* variable,
                         const char* instead) {
  if ((mode == Config::Hierarchical::kOff && !tunable) || world.size() < 2) return false;
  bool alike = false, same_count = false;
  if (!world.several_hosts_alike(&alike, &same_count).ok()) return false;
  if (!alike && mode == Config::Hierarchical::kOn && world.rank() == 0) {
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

HierarchicalAllreduce::HierarchicalAllreduce(const World& world, const Config& config,
                                             std::shared_ptr<FusionBuffer> fusion, OwnSetUp)
    : HostAllreduce(world, std::move(fusion)), config_(config) {
  applies_ = hierarchical_set_up(world, config.hierarchical_allreduce,
                                 config.autotune && !config.user_set.hierarchical_allreduce,
                                 "HOROVODLITE_HIERARCHICAL_ALLREDUCE", ": the flat ring serves large allreduces");
}

HierarchicalAllreduce::HierarchicalAllreduce(const World& world, const Config& config,
                                             std::shared_ptr<FusionBuffer> fusion)
    : HierarchicalAllreduce(world, config, std::move(fusion), OwnSetUp{}) {
  if (!applies_) return;
  const Status s = world.agree(set_up(config), "hierarchical allreduce set-up", "splitting the transport failed there");
  if (!s.ok()) {
    HVL_LOG(kWarning, "the hierarchical allreduce is disabled: " << s.message());
    local_wire_.reset();
    ring_.reset();
  }
}

Status HierarchicalAllreduce::set_up(const Config& config) {
  const transport::ContextPtr& wire = world_.wire();
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

bool HierarchicalAllreduce::accepts(DataType, ReduceOp op, int64_t bytes) const {
  if (ring_ == nullptr || op == ReduceOp::kAdasum) return false;
  const int64_t from = hierarchical_from_bytes(config_.hierarchical_allreduce, config_.ring_threshold_bytes);
  return from >= 0 && bytes >= from;
}

Status HierarchicalAllreduce::reduce(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op,
                                     double postscale) {
  return run(in, out, count, dtype, op, postscale, false, dtype);
}

Status HierarchicalAllreduce::reduce_16bit_wire(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op,
                                                double postscale, DataType wire) {
  return run(in, out, count, dtype, op, postscale, true, wire);
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
                                  double postscale, bool compressed, DataType half_type) {
  if (ring_ == nullptr) return Status::Internal("the hierarchical allreduce is not set up on this job");
  if (count <= 0) return Status::OK();
  return run_pieces(in, out, count, dtype, op, postscale, compressed, half_type);
}

Status HierarchicalAllreduce::run_pieces(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op,
                                         double postscale, bool compressed, DataType half_type) {
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const int64_t piece = std::max<int64_t>(local_size_, piece_bytes_ / esize);
  HVL_RETURN_IF_ERROR(ensure_scratch((std::min(piece, count) + local_size_ - 1) / local_size_ * esize));
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  std::vector<int> counts, displs;
  std::vector<int64_t> elements(static_cast<size_t>(local_size_));
  std::vector<size_t> bytes(static_cast<size_t>(local_size_));
  for (int64_t first = 0; first < count; first += piece) {
    split_evenly(std::min(piece, count - first), local_size_, &counts, &displs);
    for (int i = 0; i < local_size_; ++i) {
      elements[static_cast<size_t>(i)] = counts[static_cast<size_t>(i)];
      bytes[static_cast<size_t>(i)] = static_cast<size_t>(counts[static_cast<size_t>(i)] * esize);
    }
    void* shard = scratch_[0].data();
    const int n = counts[static_cast<size_t>(local_rank_)];
    HVL_RETURN_IF_ERROR(transport_ops::reducescatter(*local_wire_, src + first * esize, shard, elements, dtype, op));
    HVL_RETURN_IF_ERROR(compressed ? ring_->run_16bit_wire(shard, shard, n, dtype, op, postscale, half_type)
                                   : ring_->run(shard, shard, n, dtype, op, postscale));
    HVL_RETURN_IF_ERROR(transport_ops::allgatherv(*local_wire_, shard, dst + first * esize, bytes));
  }
  return Status::OK();
}

}  // namespace horovodlite
