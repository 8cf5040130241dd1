#include "runtime.h"

#include <algorithm>
#include <chrono>
#include <sstream>

#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "job_failure.h"
#include "logging.h"

namespace horovodlite {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

void Runtime::TimelineObserver::phase_start(const Response&, const char*) {
  saw_phase = true;
  start_ = Clock::now();
}

void Runtime::TimelineObserver::phase_end(const Response& response, const char* phase) {
  const auto end = Clock::now();
  for (const std::string& name : response.names) timeline_.phase(prefix + name, phase, start_, end);
}

Status Runtime::start(const InitOptions& options, std::shared_ptr<Runtime>* out) {
  std::shared_ptr<Runtime> rt(new Runtime());
  HVL_RETURN_IF_ERROR(Config::from_env(&rt->config_));
  set_log_level(rt->config_.log_level);
  HVL_RETURN_IF_ERROR(rt->mpi_.init(static_cast<const MPI_Comm*>(options.mpi_comm)));
  set_log_rank(rt->mpi_.rank());
  {
    auto global = std::make_unique<ProcessSetState>();
    global->id = 0;
    for (int r = 0; r < rt->mpi_.size(); ++r) global->ranks.push_back(r);
    global->rank = rt->mpi_.rank();
    global->mpi = &rt->mpi_;
    global->executor = std::make_unique<Executor>(rt->mpi_, rt->config_);
    rt->global_ = global.get();
    rt->sets_.emplace(0, std::move(global));
  }
  if (!rt->config_.timeline_path.empty()) {
    // Only rank 0 opens the file; every rank learns the outcome, so that init
    // fails everywhere or nowhere (init is collective: no rank is left waiting).
    Status ts = rt->start_timeline(rt->config_.timeline_path, rt->config_.timeline_mark_cycles);
    int ok = ts.ok() ? 1 : 0;
    HVL_MPI_CHECK(MPI_Bcast(&ok, 1, MPI_INT, 0, rt->mpi_.comm()));
    if (!ok) {
      return Status::InvalidArgument(
          "HOROVODLITE_TIMELINE: " +
          (ts.ok() ? "rank 0 cannot open '" + rt->config_.timeline_path + "'" : ts.message()));
    }
  }
  {
    // The bit vector's size and the eager slots follow these: every rank must agree.
    int64_t v[4] = {rt->config_.cache_capacity, -rt->config_.cache_capacity, rt->config_.eager_allreduce_bytes,
                    -rt->config_.eager_allreduce_bytes};
    HVL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, 4, MPI_INT64_T, MPI_MAX, rt->mpi_.comm()));
    if (v[0] != -v[1] || v[2] != -v[3]) {
      const bool cache = v[0] != -v[1];
      return Status::InvalidArgument(
          std::string(cache ? "HOROVODLITE_CACHE_CAPACITY" : "HOROVODLITE_EAGER_ALLREDUCE_BYTES") +
          " must be the same on every rank; the ranks set values from " + std::to_string(cache ? -v[1] : -v[3]) +
          " to " + std::to_string(cache ? v[0] : v[2]));
    }
  }
  rt->watchdog_ = std::make_unique<Watchdog>(
      rt->config_.peer_timeout_s,
      [r = rt.get()](const std::string& step, double waited) { r->on_peer_timeout(step, waited); });
  // Host names, so that the watchdog names the peer a ring waited for.
  HVL_RETURN_IF_ERROR(rt->watchdog_->learn_peers(rt->mpi_.comm()));
  rt->global_->controller = rt->make_controller(*rt->global_);
  if (rt->config_.autotune) {
    const Config& c = rt->config_;
    autotune::Options o;
    o.log_path = c.autotune_log;
    o.warmup_samples = static_cast<int>(c.autotune_warmup_samples);
    o.steps_per_sample = static_cast<int>(c.autotune_steps_per_sample);
    o.max_samples = static_cast<int>(c.autotune_bayes_opt_max_samples);
    o.gp_noise = c.autotune_gaussian_process_noise;
    o.tune_fusion = !c.user_set.fusion_threshold;
    o.tune_cycle_time = !c.user_set.cycle_time;
    o.tune_eager = !c.user_set.eager_allreduce_bytes;
    // The hierarchical switches are not tuned yet: their algorithms decide at set-up.
    autotune::Params initial;
    initial.fusion_threshold_bytes = c.fusion_threshold_bytes;
    initial.cycle_time_ms = c.cycle_time_ms;
    initial.eager_allreduce_bytes = c.eager_allreduce_bytes;
    rt->tuner_ = std::make_unique<autotune::Autotuner>(o, initial, rt->mpi_.rank() == 0);
    if (!rt->tuner_->active() && rt->mpi_.rank() == 0) {
      HVL_LOG(kWarning,
              "HOROVODLITE_AUTOTUNE=1: nothing to tune (FUSION_THRESHOLD, CYCLE_TIME and "
              "EAGER_ALLREDUCE_BYTES are all set by hand)");
    }
  }
  // Static process sets: collective over every rank, before the thread starts.
  for (const std::vector<int>& ranks : options.process_sets) {
    int32_t id = 0;
    Status ps = rt->register_set(ranks, &id);
    if (!ps.ok()) {
      rt->stop();
      return Status(ps.code(), "init(process_sets): " + ps.message());
    }
  }
  rt->thread_ = std::thread([r = rt.get()] { r->loop(); });
  HVL_LOG(kDebug, "started: size " << rt->mpi_.size() << ", fusion threshold " << rt->config_.fusion_threshold_bytes
                                   << " B, cycle time " << rt->config_.cycle_time_ms << " ms, cache capacity "
                                   << rt->config_.cache_capacity);
  *out = std::move(rt);
  return Status::OK();
}

Runtime::~Runtime() {
  if (thread_.joinable()) stop();
}

std::string ProcessSetState::describe() const {
  return "process set " + std::to_string(id) + " (ranks [" + rank_list(ranks) + "])";
}

std::string ProcessSetState::timeline_prefix() const {
  return id == 0 ? std::string() : "process_set_" + std::to_string(id) + "/";
}

std::unique_ptr<negotiation::Controller> Runtime::make_controller(ProcessSetState& set) {
  negotiation::Controller::SetIdentity identity;
  if (set.id != 0) {
    identity.global_ranks = set.ranks;
    identity.where = " in " + set.describe();
    identity.timeline_prefix = set.timeline_prefix();
  }
  auto controller = std::make_unique<negotiation::Controller>(
      set.mpi->global(), config_, timeline_, *watchdog_,
      [this, s = &set](const std::string& name, Request* request, Clock::time_point* enqueued) {
        return find_local(*s, name, request, enqueued);
      },
      std::move(identity));
  controller->set_local_input([this, s = &set](const std::string& name) -> const void* {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = s->table.find(name);
    // Entries leave the table only on this (the background) thread: the data stays valid.
    if (it == s->table.end() || it->second->input.device != kCpuDevice) return nullptr;
    return it->second->input.data;
  });
  return controller;
}

void Runtime::destroy(std::unique_ptr<ProcessSetState> set) {
  if (!set) return;
  if (set->executor) set->executor->drain();  // device ops still in flight complete first
  set->controller.reset();
  set->executor.reset();  // frees the algorithms' communicators (ring, NCCL)
  set->own_mpi.reset();   // frees the set's communicators
}

Status Runtime::stop(bool exiting) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_requested_ = true;
    exiting_ = exiting_ || exiting;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Process sets go before the global communicator; the global set's controller
  // stays (its counters), its executor drains.
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
  watchdog_.reset();
  timeline_.stop();
  mpi_.release();
  std::lock_guard<std::mutex> lock(mu_);
  return stop_reason_.code() == StatusCode::kAborted ? Status::OK() : stop_reason_;
}

void Runtime::request_stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_requested_ = true;
  }
  cv_.notify_all();
}

Status Runtime::start_timeline(const std::string& path, bool mark_cycles) {
  if (mpi_.rank() != 0) return Status::OK();
  return timeline_.start(path, mark_cycles);
}

Status Runtime::stop_timeline() { return timeline_.stop(); }

void Runtime::on_peer_timeout(const std::string& step, double waited_s) {
  std::ostringstream os;
  os << "rank " << mpi_.rank() << ": no progress for " << static_cast<int>(waited_s) << " s in " << step
     << ": a peer rank has died or hung (mpirun's messages name a rank that exited); aborting the job "
        "(HOROVODLITE_PEER_TIMEOUT_SECONDS="
     << config_.peer_timeout_s << ", 0 disables)";
  const Status s = Status::Aborted(os.str());
  HVL_LOG(kError, s.message());
  std::vector<std::unique_ptr<TensorEntry>> entries;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    stop_reason_ = s;
    for (auto& kv : sets_) {
      for (auto& e : kv.second->table) entries.push_back(std::move(e.second));
      kv.second->table.clear();
    }
  }
  for (auto& e : entries) e->handle->complete(s);
  timeline_.stop();  // leave a complete file behind
  // The background thread is stuck in MPI and cannot be joined: only ending the
  // job ends the wait. MPI_Abort makes mpirun stop every rank with a non-zero exit.
  MPI_Abort(mpi_.comm(), 1);
}

Stats Runtime::stats() const {
  Stats s;
  s.cycles = counters_.cycles;
  {
    std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mu_));
    for (const auto& kv : sets_) {
      const negotiation::Controller* c = kv.second->controller.get();
      if (!c) continue;
      s.negotiations += c->negotiations();
      s.cache_hits += c->cache_hits();
      s.tensors_negotiated += c->tensors_negotiated();
      s.eager_allreduces += c->eager_allreduces();
    }
  }
  s.responses_executed = counters_.responses_executed;
  s.fused_tensors = counters_.fused_tensors;
  s.errors = counters_.errors;
  return s;
}

bool Runtime::set_info(int32_t set_id, std::vector<int>* ranks, int* rank) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(set_id);
  if (it == sets_.end()) return false;
  if (ranks) *ranks = it->second->ranks;
  if (rank) *rank = it->second->rank;
  return true;
}

std::vector<int32_t> Runtime::set_ids() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int32_t> ids;
  for (const auto& kv : sets_) ids.push_back(kv.first);
  return ids;
}

uint64_t Runtime::next_serial(int32_t set_id, bool barrier) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(set_id);
  if (it == sets_.end()) return 0;
  return barrier ? it->second->barriers++ : it->second->nonames++;
}

Status Runtime::check_enqueue_locked(int32_t set_id, const std::string& name, ProcessSetState** out) {
  if (stopped_) {
    // Say why (a peer exited, a stall, the watchdog) when it was not a plain shutdown.
    return Status::Aborted(
        (stop_reason_.ok() ? std::string("horovodlite has been shut down") : stop_reason_.message()) +
        "; cannot run '" + name + "'");
  }
  auto it = sets_.find(set_id);
  if (it == sets_.end()) {
    return Status::InvalidArgument("process set " + std::to_string(set_id) +
                                   " is not registered (never added, or removed); cannot run '" + name + "'");
  }
  ProcessSetState& set = *it->second;
  if (!set.member()) {
    return Status::InvalidArgument("rank " + std::to_string(mpi_.rank()) + " is not in " + set.describe() +
                                   "; cannot run '" + name + "' on it");
  }
  if (set.removing) return Status::Precondition(set.describe() + " is being removed; cannot run '" + name + "' on it");
  if (set.table.count(name)) {
    return Status::DuplicateName("a collective named '" + name + "' is already in flight on rank " +
                                 std::to_string(mpi_.rank()) + (set.id == 0 ? std::string() : " in " + set.describe()) +
                                 "; wait for it to complete or use another name");
  }
  *out = &set;
  return Status::OK();
}

HandlePtr Runtime::enqueue(std::unique_ptr<TensorEntry> entry, int32_t set_id) {
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
    entry->enqueued = std::chrono::steady_clock::now();
    wake = set->queue.empty();
    set->queue.push_back(entry->request);
    set->table.emplace(name, std::move(entry));
  }
  // One wake-up per batch: a non-empty queue has already woken the background
  // thread (it drains the whole queue), so later enqueues only add to it.
  if (wake) cv_.notify_one();
  return handle;
}

std::vector<HandlePtr> Runtime::enqueue_group(std::vector<std::unique_ptr<TensorEntry>> entries, int32_t set_id) {
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
                                          std::to_string(mpi_.rank()) + "; the grouped op is not run");
        }
      }
    }
    if (failure.ok() && set != nullptr) {
      const auto now = std::chrono::steady_clock::now();
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

void Runtime::loop() {
#ifdef __linux__
  // The thread's short sleeps (mpi_wait's back-off while a peer catches up)
  // would otherwise last at least the default 50 us timer slack: with the rank
  // bound to one core (Open MPI's default for np <= 2) that is most of a small
  // allreduce's latency.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
#endif
  auto last = std::chrono::steady_clock::now();
  // The next cycle starts at once when there is work: new requests, a shutdown,
  // or (after a cycle that took requests or ran responses) this rank's own ops
  // still waiting for other ranks. A cycle that took part of a burst of enqueues
  // leaves the rest pending here while the peers' queues still hold theirs; they
  // start their next cycle at once, and waiting for this rank's cycle timer
  // would hold them (and this burst) for up to a cycle time. An idle cycle (no
  // requests, no responses: a peer is behind, or ranks disagree) does not count,
  // so ops that wait for a slow or stuck peer cycle at the timer's pace, never in
  // a busy loop. A cycle waits for every rank inside its negotiation (mpi_wait).
  auto work = [this] {
    if (shutdown_requested_) return true;
    for (const auto& kv : sets_)
      if (!kv.second->queue.empty() || (progressed_ && !kv.second->table.empty())) return true;
    return false;
  };
  while (true) {
    {
      // (Read each time: the autotuner may change it.)
      const auto cycle_time = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double, std::milli>(config_.cycle_time_ms));
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_until(lock, last + cycle_time, work);
    }
    last = std::chrono::steady_clock::now();
    progressed_ = false;
    if (!cycle()) break;
  }
}

bool Runtime::cycle() {
  ++counters_.cycles;
  // The global set first, on every rank: its responses may add or remove sets.
  if (!cycle_set(*global_, /*global=*/true)) return false;
  // Then each set this rank is a member of, ascending by id (see runtime.h: why
  // this cannot deadlock). The list is the same on every rank: sets change only
  // in the global step just run. Entries of sets_ are erased only on this thread.
  std::vector<ProcessSetState*> sets;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& kv : sets_)
      if (kv.first != 0 && kv.second->member()) sets.push_back(kv.second.get());
  }
  for (ProcessSetState* set : sets)
    if (!cycle_set(*set, /*global=*/false)) return false;
  return true;
}

bool Runtime::cycle_set(ProcessSetState& set, bool global) {
  negotiation::Controller::Input in;
  {
    std::lock_guard<std::mutex> lock(mu_);
    in.requests.swap(set.queue);
    // Shutdown is agreed by the global set only (every rank stops in the same cycle).
    in.shutdown = global && shutdown_requested_;
    in.exiting = global && exiting_;
  }
  if (!in.requests.empty()) progressed_ = true;
  const bool tuning = global && tuner_ && tuner_->pending_broadcast();
  if (tuning) {
    in.tuning.resize(autotune::Autotuner::kWords);
    tuner_->encode(in.tuning.data());
  }
  negotiation::Controller::Output out;
  const Status s = set.controller->compute_responses(std::move(in), &out);
  if (!s.ok()) {
    record_job_failure(s.message());  // (before waking the waiters) exit must not wait for unreachable peers
    abort_all(global ? s : Status(s.code(), set.describe() + ": " + s.message()));
    return false;
  }
  const Clock::time_point ready = Clock::now();
  if (tuning && out.tuning.size() == autotune::Autotuner::kWords) {
    autotune::Params p;
    tuner_->decode(out.tuning.data(), &p);
    apply_tuning(p);
  }
  if (!out.responses.empty()) progressed_ = true;
  for (const Response& r : out.responses) run(set, r, ready);
  if (global && tuner_ && tuner_->active() && !out.responses.empty()) {
    // Every rank runs the same responses: the same names and bytes everywhere.
    std::vector<std::pair<std::string, int64_t>> tensors;
    for (const Response& r : out.responses) {
      const bool reduced = r.type == OpType::kAllreduce && r.tensor_sizes.size() == r.names.size();
      for (size_t i = 0; i < r.names.size(); ++i) {
        const int64_t bytes = reduced ? r.tensor_sizes[i] * static_cast<int64_t>(dtype_size(r.dtype)) : 0;
        tensors.emplace_back(r.names[i], bytes);
      }
    }
    tuner_->record(tensors, Clock::now());
  }
  if (out.shutdown) {
    if (global) {
      // A stall in a process set: its members know why; tell the other ranks too.
      const Status shared = share_stall_reason();
      if (!shared.ok()) HVL_LOG(kWarning, "could not share the stall reason: " << shared.message());
      abort_all(Status::Aborted(shutdown_message(out.shutdown_ranks, out.exiting_ranks)));
      return false;
    }
    // A stall shutdown in a set: the set's members ask the global set, so that
    // every rank stops at the next cycle.
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_requested_ = true;
  }
  return true;
}

void Runtime::apply_tuning(const autotune::Params& p) {
  config_.fusion_threshold_bytes = p.fusion_threshold_bytes;
  config_.cycle_time_ms = p.cycle_time_ms;
  config_.eager_allreduce_bytes = p.eager_allreduce_bytes;
  HVL_LOG(kDebug, "autotune: fusion threshold " << p.fusion_threshold_bytes << " B, cycle time " << p.cycle_time_ms
                                                << " ms, eager allreduce " << p.eager_allreduce_bytes << " B");
}

std::string Runtime::shutdown_message(const std::vector<int>& requesters, const std::vector<int>& exiting) const {
  if (!exiting.empty()) {
    return "horovodlite has been shut down: rank(s) " + rank_list(exiting) +
           " exited without calling horovodlite::shutdown()";
  }
  if (!stall_reason_.empty()) return "horovodlite has been shut down after a stall: " + stall_reason_;
  return "horovodlite has been shut down (shutdown() was called, or a wait was interrupted, on rank(s) " +
         rank_list(requesters) + ")";
}

Status Runtime::share_stall_reason() {
  MPI_Comm comm = mpi_.comm();
  const int size = mpi_.size();
  MPI_Request req;
  if (watchdog_) watchdog_->enter("shutdown (sharing the stall reason)");
  struct Leave {
    Watchdog* w;
    ~Leave() {
      if (w) w->leave();
    }
  } leave{watchdog_.get()};
  int from = stall_reason_.empty() ? size : mpi_.rank();  // the lowest rank that knows one sends it
  HVL_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, &from, 1, MPI_INT, MPI_MIN, comm, &req));
  HVL_RETURN_IF_ERROR(mpi_wait(&req, "MPI_Iallreduce"));
  if (from == size) return Status::OK();  // not a stall
  int64_t len = static_cast<int64_t>(stall_reason_.size());
  HVL_MPI_CHECK(MPI_Ibcast(&len, 1, MPI_INT64_T, from, comm, &req));
  HVL_RETURN_IF_ERROR(mpi_wait(&req, "MPI_Ibcast"));
  std::string reason = stall_reason_;
  reason.resize(static_cast<size_t>(len));
  HVL_MPI_CHECK(MPI_Ibcast(reason.data(), static_cast<int>(len), MPI_CHAR, from, comm, &req));
  HVL_RETURN_IF_ERROR(mpi_wait(&req, "MPI_Ibcast"));
  if (stall_reason_.empty()) stall_reason_ = reason;
  return Status::OK();
}

bool Runtime::find_local(ProcessSetState& set, const std::string& name, Request* request, Clock::time_point* enqueued) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = set.table.find(name);
  if (it == set.table.end()) return false;
  if (request) *request = it->second->request;
  if (enqueued) *enqueued = it->second->enqueued;
  return true;
}

void Runtime::run(ProcessSetState& set, const Response& r, Clock::time_point ready) {
  std::vector<TensorEntry*> entries(r.names.size(), nullptr);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < r.names.size(); ++i) {
      auto it = set.table.find(r.names[i]);
      if (it != set.table.end()) entries[i] = it->second.get();
    }
  }
  OpResult result;
  const bool needs_local = r.type == OpType::kAllgather || r.type == OpType::kBroadcast ||
                           r.type == OpType::kAlltoall || r.type == OpType::kReducescatter;
  const auto missing = std::find(entries.begin(), entries.end(), nullptr);
  if (needs_local && missing != entries.end()) {
    result.status = Status::Internal("rank " + std::to_string(mpi_.rank()) + " has no tensor for '" +
                                     r.names[static_cast<size_t>(missing - entries.begin())] + "'" +
                                     (set.id == 0 ? std::string() : " in " + set.describe()));
    HVL_LOG(kError, result.status.message());
  } else if (r.type == OpType::kBarrier && entries[0] != nullptr && entries[0]->action) {
    // Adding or removing a process set: every rank runs it at this point of the
    // global set's response list (collective over every rank).
    if (watchdog_) watchdog_->enter("process set change '" + r.names[0] + "'");
    result.status = entries[0]->action();
    if (watchdog_) watchdog_->leave();
  } else {
    const bool timeline_on = timeline_.active();
    Executor& executor = *set.executor;
    executor.set_observer(timeline_on ? &observer_ : nullptr);
    observer_.saw_phase = false;
    observer_.prefix = set.timeline_prefix();
    if (watchdog_) watchdog_->enter(std::string(op_type_name(r.type)) + " of '" + r.names[0] + "'");
    const Clock::time_point start = Clock::now();
    result = executor.execute(r, entries);
    const Clock::time_point end = Clock::now();
    if (watchdog_) watchdog_->leave();
    if (timeline_on) {
      const std::string op = Timeline::upper(op_type_name(r.type));
      const std::string collective = result.algorithm;
      for (const std::string& tensor : r.names) {
        const std::string name = observer_.prefix + tensor;  // the set's own row
        if (r.type == OpType::kError) {
          timeline_.instant(name, "ERROR", r.error_message, start);
          continue;
        }
        timeline_.phase(name, op, ready, end);
        timeline_.phase(name, "QUEUE", ready, start);
        if (!observer_.saw_phase && !collective.empty()) timeline_.phase(name, collective, start, end);
      }
    }
  }
  if (r.type == OpType::kError && r.error_code == StatusCode::kAborted) {
    // A stall: a peer may be stuck in its own code, so exit must not wait for it
    // (recorded before the waiters wake: they may exit at once).
    record_job_failure(r.error_message);
    if (stall_reason_.empty()) stall_reason_ = r.error_message;  // a stall shutdown follows in the next cycle
  }
  ++counters_.responses_executed;
  if (r.names.size() > 1) counters_.fused_tensors += r.names.size();
  if (r.type == OpType::kError) ++counters_.errors;
  if (r.type == OpType::kJoin && entries[0]) entries[0]->handle->set_last_joined_rank(r.last_joined_rank);
  const Status& s = result.status;
  if (!s.ok() && r.type != OpType::kError)
    HVL_LOG(kWarning, "collective on '" << r.names[0] << "' failed: " << s.message());

  // Remove the entries before completing them, so that a waiter may reuse the name at once.
  std::vector<std::unique_ptr<TensorEntry>> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& name : r.names) {
      auto it = set.table.find(name);
      if (it == set.table.end()) continue;
      done.push_back(std::move(it->second));
      set.table.erase(it);
    }
  }
  // Device ops complete once the device has finished (on the device's completion thread).
  if (result.deferred) {
    result.deferred->complete(std::move(done), s);
  } else {
    // All complete before any waiter wakes: a caller synchronizing a fused
    // batch one handle after the other waits once, not once per tensor.
    for (auto& e : done) e->handle->complete_without_waking(s);
    for (auto& e : done) e->handle->wake();
  }
}

void Runtime::abort_all(const Status& status) {
  std::vector<std::unique_ptr<TensorEntry>> entries;
  std::vector<negotiation::Controller*> controllers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    stop_reason_ = status;
    for (auto& kv : sets_) {
      for (auto& e : kv.second->table) entries.push_back(std::move(e.second));
      kv.second->table.clear();
      kv.second->queue.clear();
      if (kv.second->controller) controllers.push_back(kv.second->controller.get());
    }
  }
  for (negotiation::Controller* c : controllers) c->clear();
  for (auto& e : entries) e->handle->complete(status);
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

Status Runtime::register_set(std::vector<int> ranks, int32_t* id) {
  std::sort(ranks.begin(), ranks.end());
  const int n = mpi_.size();
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
  HVL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, agree, 3, MPI_INT64_T, MPI_MAX, mpi_.comm()));
  if (!local.ok()) return local;
  if (agree[2] != 0)
    return Status::InvalidArgument("process set ranks [" + rank_list(ranks) +
                                   "]: invalid ranks were passed on another rank");
  if (agree[0] != -agree[1]) {
    return Status::InvalidArgument("process set ranks differ between ranks (rank " + std::to_string(mpi_.rank()) +
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
  const auto pos = std::find(ranks.begin(), ranks.end(), mpi_.rank());
  const bool member = pos != ranks.end();
  MPI_Comm comm = MPI_COMM_NULL;
  HVL_MPI_CHECK(MPI_Comm_split(mpi_.comm(), member ? 0 : MPI_UNDEFINED, static_cast<int>(pos - ranks.begin()), &comm));
  if (member) {
    set->rank = static_cast<int>(pos - ranks.begin());
    set->own_mpi = std::make_unique<MpiContext>();
    HVL_RETURN_IF_ERROR(set->own_mpi->init_subset(mpi_, comm));
    set->mpi = set->own_mpi.get();
    set->executor = std::make_unique<Executor>(*set->mpi, config_);  // collective over the set
    set->controller = make_controller(*set);
  }
  HVL_LOG(kDebug, "registered " << set->describe());
  *id = set->id;
  std::lock_guard<std::mutex> lock(mu_);
  sets_.emplace(set->id, std::move(set));
  return Status::OK();
}

Status Runtime::unregister_set(int32_t id) {
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
  std::vector<int> all(static_cast<size_t>(mpi_.size()));
  HVL_MPI_CHECK(MPI_Allgather(&busy, 1, MPI_INT, all.data(), 1, MPI_INT, mpi_.comm()));
  std::vector<int> busy_ranks;
  for (int r = 0; r < mpi_.size(); ++r)
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
