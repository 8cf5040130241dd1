#include "process_set_table.h"

#include <algorithm>

#include "logging.h"

namespace horovodlite {

std::string ProcessSetState::describe() const {
  return "process set " + std::to_string(id) + " (ranks [" + rank_list(ranks) + "])";
}

std::string ProcessSetState::timeline_prefix() const {
  return id == 0 ? std::string() : "process_set_" + std::to_string(id) + "/";
}

// What a set's controller reads of this rank's ops in flight: under the table's
// mutex, nothing else.
class ProcessSetTable::SetOps : public negotiation::LocalOps {
 public:
  SetOps(ProcessSetTable& table, ProcessSetState& set) : table_(table), set_(set) {}
  bool find(const std::string& name, Request* request, Clock::time_point* enqueued) const override {
    std::lock_guard<std::mutex> lock(table_.mu_);
    auto it = set_.table.find(name);
    if (it == set_.table.end()) return false;
    if (request) *request = it->second->request;
    if (enqueued) *enqueued = it->second->enqueued;
    return true;
  }
  const void* host_input(const std::string& name) const override {
    std::lock_guard<std::mutex> lock(table_.mu_);
    auto it = set_.table.find(name);
    // Entries leave the table only on the background thread: the data stays valid.
    if (it == set_.table.end() || it->second->input.device != kCpuDevice) return nullptr;
    return it->second->input.data;
  }

 private:
  ProcessSetTable& table_;
  ProcessSetState& set_;
};

ProcessSetTable::ProcessSetTable(World& world, const Config& config, Timeline& timeline, Watchdog& watchdog)
    : world_(world), config_(config), timeline_(timeline), watchdog_(watchdog) {}

ProcessSetTable::~ProcessSetTable() = default;

void ProcessSetTable::build_member(ProcessSetState& set) {
  set.executor = std::make_unique<Executor>(*set.world, config_);  // collective over the set
  set.local_ops = std::make_unique<SetOps>(*this, set);
  negotiation::Controller::SetIdentity identity;
  if (set.id != 0) {
    identity.global_ranks = set.ranks;
    identity.where = " in " + set.describe();
    identity.timeline_prefix = set.timeline_prefix();
  }
  set.controller = std::make_unique<negotiation::Controller>(set.world->global(), config_, timeline_, watchdog_,
                                                             *set.local_ops, std::move(identity));
}

void ProcessSetTable::add_global() {
  auto global = std::make_unique<ProcessSetState>();
  global->id = 0;
  for (int r = 0; r < world_.size(); ++r) global->ranks.push_back(r);
  global->rank = world_.rank();
  global->world = &world_;
  build_member(*global);
  global_ = global.get();
  std::lock_guard<std::mutex> lock(mu_);
  sets_.emplace(0, std::move(global));
}

void ProcessSetTable::destroy(std::unique_ptr<ProcessSetState> set) {
  if (!set) return;
  if (set->executor) set->executor->drain();  // device ops still in flight complete first
  set->controller.reset();
  set->executor.reset();   // frees the algorithms' communicators (ring, NCCL)
  set->own_world.reset();  // frees the set's communicators
}

void ProcessSetTable::destroy_process_sets() {
  std::vector<std::unique_ptr<ProcessSetState>> sets;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = sets_.begin(); it != sets_.end();) {
      if (it->first == 0) {
        ++it;
        continue;
      }
      sets.push_back(std::move(it->second));
      it = sets_.erase(it);
    }
  }
  for (auto& set : sets) destroy(std::move(set));
  if (global_ && global_->executor) global_->executor->drain();
}

std::vector<ProcessSetState*> ProcessSetTable::member_process_sets() {
  std::vector<ProcessSetState*> sets;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& kv : sets_)
    if (kv.first != 0 && kv.second->member()) sets.push_back(kv.second.get());
  return sets;
}

bool ProcessSetTable::set_info(int32_t set_id, std::vector<int>* ranks, int* rank) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(set_id);
  if (it == sets_.end()) return false;
  if (ranks) *ranks = it->second->ranks;
  if (rank) *rank = it->second->rank;
  return true;
}

std::vector<int32_t> ProcessSetTable::set_ids() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int32_t> ids;
  for (const auto& kv : sets_) ids.push_back(kv.first);
  return ids;
}

uint64_t ProcessSetTable::next_serial(int32_t set_id, bool barrier) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(set_id);
  if (it == sets_.end()) return 0;
  return barrier ? it->second->barriers++ : it->second->nonames++;
}

void ProcessSetTable::add_counters(Stats* s) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& kv : sets_) {
    const negotiation::Controller* c = kv.second->controller.get();
    if (!c) continue;
    s->negotiations += c->negotiations();
    s->cache_hits += c->cache_hits();
    s->tensors_negotiated += c->tensors_negotiated();
    s->eager_allreduces += c->eager_allreduces();
  }
}

Status ProcessSetTable::check_enqueue_locked(int32_t set_id, const std::string& name, ProcessSetState** out) {
  if (closed_) {
    // Say why (a peer exited, a stall, the watchdog) when it was not a plain shutdown.
    return Status::Aborted(
        (close_reason_.ok() ? std::string("horovodlite has been shut down") : close_reason_.message()) +
        "; cannot run '" + name + "'");
  }
  auto it = sets_.find(set_id);
  if (it == sets_.end()) {
    return Status::InvalidArgument("process set " + std::to_string(set_id) +
                                   " is not registered (never added, or removed); cannot run '" + name + "'");
  }
  ProcessSetState& set = *it->second;
  if (!set.member()) {
    return Status::InvalidArgument("rank " + std::to_string(world_.rank()) + " is not in " + set.describe() +
                                   "; cannot run '" + name + "' on it");
  }
  if (set.removing) return Status::Precondition(set.describe() + " is being removed; cannot run '" + name + "' on it");
  if (set.table.count(name)) {
    return Status::DuplicateName(
        "a collective named '" + name + "' is already in flight on rank " + std::to_string(world_.rank()) +
        (set.id == 0 ? std::string() : " in " + set.describe()) + "; wait for it to complete or use another name");
  }
  *out = &set;
  return Status::OK();
}

HandlePtr ProcessSetTable::enqueue(std::unique_ptr<TensorEntry> entry, int32_t set_id) {
  HandlePtr handle = entry->handle;
  const std::string& name = entry->request.name;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ProcessSetState* set = nullptr;
    const Status s = check_enqueue_locked(set_id, name, &set);
    if (!s.ok()) {
      handle->complete(s);
      return handle;
    }
    entry->request.rank = set->rank;
    entry->enqueued = Clock::now();
    wake = set->queue.empty();
    set->queue.push_back(entry->request);
    set->table.emplace(name, std::move(entry));
  }
  // One wake-up per batch: a non-empty queue has already woken the background
  // thread (it drains the whole queue), so later enqueues only add to it.
  if (wake) cv_.notify_one();
  return handle;
}

std::vector<HandlePtr> ProcessSetTable::enqueue_group(std::vector<std::unique_ptr<TensorEntry>> entries,
                                                      int32_t set_id) {
  std::vector<HandlePtr> handles;
  for (const auto& e : entries) handles.push_back(e->handle);
  Status failure;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ProcessSetState* set = nullptr;
    for (size_t i = 0; failure.ok() && i < entries.size(); ++i) {
      const std::string& name = entries[i]->request.name;
      failure = check_enqueue_locked(set_id, name, &set);
      for (size_t j = 0; failure.ok() && j < i; ++j) {
        if (entries[j]->request.name == name) {
          failure = Status::DuplicateName("'" + name + "' appears twice in one grouped op on rank " +
                                          std::to_string(world_.rank()) + "; the grouped op is not run");
        }
      }
    }
    if (failure.ok() && set != nullptr) {
      const auto now = Clock::now();
      wake = set->queue.empty();
      for (auto& e : entries) {
        e->request.rank = set->rank;
        e->enqueued = now;
        set->queue.push_back(e->request);
        const std::string name = e->request.name;
        set->table.emplace(name, std::move(e));
      }
    }
  }
  if (!failure.ok()) {
    for (const HandlePtr& h : handles) h->complete(failure);
    return handles;
  }
  if (wake) cv_.notify_one();
  return handles;
}

std::vector<std::unique_ptr<TensorEntry>> ProcessSetTable::close(const Status& status,
                                                                 std::vector<negotiation::Controller*>* controllers) {
  std::vector<std::unique_ptr<TensorEntry>> entries;
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  close_reason_ = status;
  for (auto& kv : sets_) {
    for (auto& e : kv.second->table) entries.push_back(std::move(e.second));
    kv.second->table.clear();
    kv.second->queue.clear();
    if (controllers && kv.second->controller) controllers->push_back(kv.second->controller.get());
  }
  return entries;
}

bool ProcessSetTable::closed() {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

Status ProcessSetTable::close_reason() {
  std::lock_guard<std::mutex> lock(mu_);
  return close_reason_;
}

bool ProcessSetTable::idle_locked() const {
  if (sets_.size() != 1) return false;  // process sets: their members' cycles need this rank's global step
  for (const auto& kv : sets_)
    if (!kv.second->queue.empty() || !kv.second->table.empty()) return false;
  return true;
}

void ProcessSetTable::wait_for_work(Clock::time_point deadline, bool in_flight, const std::function<bool()>& stop) {
  std::unique_lock<std::mutex> lock(mu_);
  auto ready = [&] {
    if (stop()) return true;
    for (const auto& kv : sets_)
      if (!kv.second->queue.empty() || (in_flight && !kv.second->table.empty())) return true;
    return false;
  };
  // An idle rank (nothing queued or in flight, no process sets) waits for its
  // next op, up to kIdleWait, instead of one cycle time: a cycle's vote is
  // collective, so its idle cycles would only agree that there is nothing to do,
  // a vote and the wake-ups around it every millisecond, on the cores that
  // train (a simulated training step of 62 gradients: 100-140 cycles per step
  // before, 6-10 after; docs/performance.md). A peer's op that needs this rank
  // needs its tensor too, whose enqueue wakes this thread at once; shutdown
  // wakes it too. What waits longer: a peer's stall warning, or its view of a
  // rank that died, by up to kIdleWait.
  cv_.wait_until(lock, idle_locked() ? std::max(deadline, Clock::now() + kIdleWait) : deadline, ready);
}

void ProcessSetTable::wake() {
  // Taking the mutex orders the caller's change to what stop() reads before the
  // waiter's next look at it: the notification cannot fall between the two.
  { std::lock_guard<std::mutex> lock(mu_); }
  cv_.notify_all();
}

std::vector<Request> ProcessSetTable::drain(ProcessSetState& set) {
  std::vector<Request> out;
  std::lock_guard<std::mutex> lock(mu_);
  out.swap(set.queue);
  return out;
}

std::vector<TensorEntry*> ProcessSetTable::lookup(ProcessSetState& set, const std::vector<std::string>& names) {
  std::vector<TensorEntry*> entries(names.size(), nullptr);
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < names.size(); ++i) {
    auto it = set.table.find(names[i]);
    if (it != set.table.end()) entries[i] = it->second.get();
  }
  return entries;
}

std::vector<std::unique_ptr<TensorEntry>> ProcessSetTable::take(ProcessSetState& set,
                                                                const std::vector<std::string>& names) {
  std::vector<std::unique_ptr<TensorEntry>> done;
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& name : names) {
    auto it = set.table.find(name);
    if (it == set.table.end()) continue;
    done.push_back(std::move(it->second));
    set.table.erase(it);
  }
  return done;
}

namespace {

// The same on every rank for the same list (FNV-1a over the ranks).
int64_t ranks_hash(const std::vector<int>& ranks) {
  uint64_t h = 1469598103934665603ull;
  for (int r : ranks) {
    h ^= static_cast<uint32_t>(r);
    h *= 1099511628211ull;
  }
  h ^= ranks.size();
  h *= 1099511628211ull;
  return static_cast<int64_t>(h >> 2);  // non-negative, so that its negation fits
}

}  // namespace

Status ProcessSetTable::register_set(std::vector<int> ranks, int32_t* id) {
  std::sort(ranks.begin(), ranks.end());
  const int n = world_.size();
  Status local;
  if (ranks.empty()) local = Status::InvalidArgument("a process set needs at least one rank");
  for (size_t i = 0; local.ok() && i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= n) {
      local = Status::InvalidArgument("process set ranks [" + rank_list(ranks) + "]: rank " + std::to_string(ranks[i]) +
                                      " is out of range (there are " + std::to_string(n) + " ranks)");
    } else if (i > 0 && ranks[i] == ranks[i - 1]) {
      local = Status::InvalidArgument("process set ranks [" + rank_list(ranks) + "] name rank " +
                                      std::to_string(ranks[i]) + " twice");
    }
  }
  // Every rank must pass the same (valid) ranks: agree before anything is built.
  const int64_t h = local.ok() ? ranks_hash(ranks) : -1;
  int64_t agree[3] = {h, -h, local.ok() ? 0 : 1};
  HVL_RETURN_IF_ERROR(world_.max_int64(agree, 3));
  if (!local.ok()) return local;
  if (agree[2] != 0)
    return Status::InvalidArgument("process set ranks [" + rank_list(ranks) +
                                   "]: invalid ranks were passed on another rank");
  if (agree[0] != -agree[1]) {
    return Status::InvalidArgument("process set ranks differ between ranks (rank " + std::to_string(world_.rank()) +
                                   " passed [" + rank_list(ranks) + "]); every rank must pass the same ranks");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& kv : sets_) {
      if (kv.second->ranks == ranks) {
        return Status::InvalidArgument("a process set with ranks [" + rank_list(ranks) + "] exists already (id " +
                                       std::to_string(kv.first) + ")");
      }
    }
  }
  auto set = std::make_unique<ProcessSetState>();
  set->id = next_set_id_++;
  set->ranks = ranks;
  const auto pos = std::find(ranks.begin(), ranks.end(), world_.rank());
  // Collective over every rank (the members get the set's world).
  HVL_RETURN_IF_ERROR(world_.split(ranks, "ps." + std::to_string(set->id), &set->own_world));
  if (set->own_world) {
    set->rank = static_cast<int>(pos - ranks.begin());
    set->world = set->own_world.get();
    build_member(*set);
  }
  HVL_LOG(kDebug, "registered " << set->describe());
  *id = set->id;
  std::lock_guard<std::mutex> lock(mu_);
  sets_.emplace(set->id, std::move(set));
  return Status::OK();
}

Status ProcessSetTable::unregister_set(int32_t id) {
  int busy = 0;
  std::string here;
  std::string what;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sets_.find(id);
    if (it == sets_.end() || id == 0) {
      return Status::InvalidArgument("process set " + std::to_string(id) +
                                     (id == 0 ? " is the global set, which cannot be removed"
                                              : " is not registered (never added, or removed already)"));
    }
    ProcessSetState& set = *it->second;
    what = set.describe();
    if (!set.table.empty()) {
      busy = 1;
      here = set.table.begin()->first;
    } else {
      set.removing = true;  // no new ops while the ranks agree
    }
  }
  std::vector<int32_t> all(static_cast<size_t>(world_.size()));
  const int32_t mine = busy;
  HVL_RETURN_IF_ERROR(world_.allgather(&mine, sizeof(mine), all.data()));
  std::vector<int> busy_ranks;
  for (int r = 0; r < world_.size(); ++r)
    if (all[static_cast<size_t>(r)]) busy_ranks.push_back(r);
  std::unique_ptr<ProcessSetState> removed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sets_.find(id);
    if (!busy_ranks.empty()) {
      it->second->removing = false;
      return Status::Precondition("cannot remove " + what + ": ops on it are in flight on rank(s) " +
                                  rank_list(busy_ranks) + (busy ? " (here: '" + here + "')" : std::string()) +
                                  "; wait for them first");
    }
    removed = std::move(it->second);
    sets_.erase(it);
  }
  HVL_LOG(kDebug, "removed " << what);
  destroy(std::move(removed));
  return Status::OK();
}

}  // namespace horovodlite
