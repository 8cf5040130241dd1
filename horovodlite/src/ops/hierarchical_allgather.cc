#include "ops/hierarchical_allgather.h"

#include <algorithm>
#include <cstring>

#include "logging.h"
#include "ops/fusion.h"
#include "ops/hierarchical_allreduce.h"
#include "transport/collectives.h"

namespace horovodlite {

HierarchicalAllgather::HierarchicalAllgather(const World& world, const Config& config,
                                             std::shared_ptr<FusionBuffer> fusion, OwnSetUp)
    : HostAllgather(world, std::move(fusion)), config_(config) {
  if (hierarchical_set_up(world, config.hierarchical_allgather,
                          config.autotune && !config.user_set.hierarchical_allgather,
                          "HOROVODLITE_HIERARCHICAL_ALLGATHER", "")) {
    learn_layout();
  }
}

HierarchicalAllgather::HierarchicalAllgather(const World& world, const Config& config,
                                             std::shared_ptr<FusionBuffer> fusion)
    : HierarchicalAllgather(world, config, std::move(fusion), OwnSetUp{}) {
  if (!layout_known()) return;
  const Status s = world.agree(set_up(), "hierarchical allgather set-up", "splitting the transport failed there");
  if (!s.ok()) {
    HVL_LOG(kWarning, "the hierarchical allgather is disabled: " << s.message());
    members_.clear();
    local_wire_.reset();
    cross_wire_.reset();
  }
}

void HierarchicalAllgather::learn_layout() {
  const transport::ContextPtr& wire = world_.wire();
  const transport::Topology& topo = wire->topology();
  const int size = wire->size();
  // A host's number: the cross rank of its local rank 0.
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
}

Status HierarchicalAllgather::set_up() {
  const transport::ContextPtr& wire = world_.wire();
  HVL_RETURN_IF_ERROR(
      wire->split(wire->topology().local_ranks(wire->rank()), "hierarchical_allgather/local", &local_wire_));
  return wire->split(cross_members_, "hierarchical_allgather/cross", &cross_wire_);
}

void HierarchicalAllgather::place_own_block(const void* send, void* buf, const std::vector<int>& counts,
                                            const std::vector<int>& displs, size_t elem) const {
  if (send == nullptr) return;
  const int me = world_.rank();
  std::memcpy(static_cast<char*>(buf) + static_cast<int64_t>(displs[me]) * static_cast<int64_t>(elem), send,
              static_cast<size_t>(counts[me]) * elem);
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

bool HierarchicalAllgather::enabled(const Response& r) const {
  if (members_.empty() || r.device != kCpuDevice) return false;
  const int64_t from = hierarchical_from_bytes(config_.hierarchical_allgather, config_.ring_threshold_bytes);
  return from >= 0 && response_bytes(r) >= from;
}

Status HierarchicalAllgather::exchange(const void* send, void* buf, const std::vector<int>& counts,
                                       const std::vector<int>& displs, DataType dtype) {
  const size_t elem = dtype_size(dtype);
  place_own_block(send, buf, counts, displs, elem);
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

}  // namespace horovodlite
