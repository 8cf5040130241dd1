// The public API of process sets (include/horovodlite/process_set.h): adding and
// removing sets (a barrier of the global set whose action every rank runs at the
// same point, ProcessSetTable::register_set / unregister_set) and the queries.
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "horovodlite/horovodlite.h"
#include "runtime.h"

namespace horovodlite {

namespace {

std::atomic<uint64_t> g_set_changes{0};  // add/remove_process_set calls (the same order on every rank)

Status check_dynamic(const std::shared_ptr<Runtime>& rt, const char* what) {
  if (!rt) return Status::Precondition(std::string("horovodlite is not initialized; cannot ") + what);
  if (!rt->config().dynamic_process_sets) {
    return Status::Precondition(std::string("cannot ") + what +
                                ": runtime support for dynamic process sets is not enabled; set "
                                "HOROVODLITE_DYNAMIC_PROCESS_SETS=1 (or HOROVOD_DYNAMIC_PROCESS_SETS=1) on every "
                                "rank, or pass the sets to init()");
  }
  return Status::OK();
}

// A barrier of the global set whose execution runs `action` on every rank.
Status run_set_change(const std::shared_ptr<Runtime>& rt, const std::string& name, std::function<Status()> action) {
  TensorView none;
  none.dtype = DataType::kUInt8;
  none.shape = {0};
  auto e = std::make_unique<TensorEntry>();
  e->request.type = OpType::kBarrier;
  e->request.name = name;
  e->request.dtype = none.dtype;
  e->request.shape = none.shape;
  e->input = e->output = none;
  e->handle = std::make_shared<Handle>(name);
  e->action = std::move(action);
  if (rt->on_background_thread()) {
    return Status::Precondition("process sets cannot be added or removed from a completion callback");
  }
  return rt->enqueue(std::move(e), 0)->wait();
}

}  // namespace

Status add_process_set(const std::vector<int>& ranks, ProcessSet* out) {
  auto rt = current_runtime();
  HVL_RETURN_IF_ERROR(check_dynamic(rt, "add a process set"));
  auto id = std::make_shared<int32_t>(-1);
  Runtime* r = rt.get();
  HVL_RETURN_IF_ERROR(run_set_change(rt, "horovodlite.process_set.add." + std::to_string(g_set_changes.fetch_add(1)),
                                     [r, ranks, id] { return r->process_sets().register_set(ranks, id.get()); }));
  if (out) *out = ProcessSet(*id);
  return Status::OK();
}

Status remove_process_set(const ProcessSet& set) {
  auto rt = current_runtime();
  HVL_RETURN_IF_ERROR(check_dynamic(rt, "remove a process set"));
  if (set.is_global()) return Status::InvalidArgument("the global process set (id 0) cannot be removed");
  Runtime* r = rt.get();
  const int32_t id = set.id();
  return run_set_change(rt, "horovodlite.process_set.remove." + std::to_string(g_set_changes.fetch_add(1)),
                        [r, id] { return r->process_sets().unregister_set(id); });
}

std::vector<ProcessSet> process_sets() {
  std::vector<ProcessSet> out;
  auto rt = current_runtime();
  if (!rt) return out;
  for (int32_t id : rt->process_sets().set_ids()) out.emplace_back(id);
  return out;
}

bool ProcessSet::included() const { return rank() >= 0; }

int ProcessSet::rank() const {
  auto rt = current_runtime();
  int r = -1;
  if (!rt || !rt->process_sets().set_info(id_, nullptr, &r)) return -1;
  return r;
}

int ProcessSet::size() const {
  auto rt = current_runtime();
  std::vector<int> ranks;
  if (!rt || !rt->process_sets().set_info(id_, &ranks, nullptr)) return -1;
  return static_cast<int>(ranks.size());
}

std::vector<int> ProcessSet::ranks() const {
  auto rt = current_runtime();
  std::vector<int> ranks;
  if (rt) rt->process_sets().set_info(id_, &ranks, nullptr);
  return ranks;
}

}  // namespace horovodlite
