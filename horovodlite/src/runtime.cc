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
  for (const std::string& name : response.names) timeline_.phase(name, phase, start_, end);
}

Status Runtime::start(const InitOptions& options, std::shared_ptr<Runtime>* out) {
  std::shared_ptr<Runtime> rt(new Runtime());
  HVL_RETURN_IF_ERROR(Config::from_env(&rt->config_));
  set_log_level(rt->config_.log_level);
  HVL_RETURN_IF_ERROR(rt->mpi_.init(static_cast<const MPI_Comm*>(options.mpi_comm)));
  set_log_rank(rt->mpi_.rank());
  rt->executor_ = std::make_unique<Executor>(rt->mpi_, rt->config_);
  if (!rt->config_.timeline_path.empty()) {
    // Only rank 0 opens the file; every rank learns the outcome, so that init
    // fails everywhere or nowhere (init is collective: no rank is left waiting).
    Status ts = rt->start_timeline(rt->config_.timeline_path, rt->config_.timeline_mark_cycles);
    int ok = ts.ok() ? 1 : 0;
    HVL_MPI_CHECK(MPI_Bcast(&ok, 1, MPI_INT, 0, rt->mpi_.comm()));
    if (!ok) {
      return Status::InvalidArgument("HOROVODLITE_TIMELINE: " +
                                     (ts.ok() ? "rank 0 cannot open '" + rt->config_.timeline_path + "'"
                                              : ts.message()));
    }
  }
  rt->watchdog_ = std::make_unique<Watchdog>(
      rt->config_.peer_timeout_s, [r = rt.get()](const std::string& step, double waited) { r->on_peer_timeout(step, waited); });
  rt->controller_ = std::make_unique<Controller>(
      rt->mpi_.global(), rt->config_, rt->timeline_, *rt->watchdog_,
      [r = rt.get()](const std::string& name, Request* request, Clock::time_point* enqueued) {
        return r->find_local(name, request, enqueued);
      });
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

Status Runtime::stop(bool exiting) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_requested_ = true;
    exiting_ = exiting_ || exiting;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (executor_) executor_->drain();  // device ops still in flight complete first
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
  std::unordered_map<std::string, std::unique_ptr<TensorEntry>> table;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    stop_reason_ = s;
    table.swap(table_);
  }
  for (auto& kv : table) kv.second->handle->complete(s);
  timeline_.stop();  // leave a complete file behind
  // The background thread is stuck in MPI and cannot be joined: only ending the
  // job ends the wait. MPI_Abort makes mpirun stop every rank with a non-zero exit.
  MPI_Abort(mpi_.comm(), 1);
}

Stats Runtime::stats() const {
  Stats s;
  s.cycles = counters_.cycles;
  if (controller_) {
    s.negotiations = controller_->negotiations();
    s.cache_hits = controller_->cache_hits();
    s.tensors_negotiated = controller_->tensors_negotiated();
  }
  s.responses_executed = counters_.responses_executed;
  s.fused_tensors = counters_.fused_tensors;
  s.errors = counters_.errors;
  return s;
}

HandlePtr Runtime::enqueue(std::unique_ptr<TensorEntry> entry) {
  HandlePtr handle = entry->handle;
  const std::string& name = entry->request.name;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) {
      // Say why (a peer exited, a stall, the watchdog) when it was not a plain shutdown.
      handle->complete(Status::Aborted((stop_reason_.ok() ? std::string("horovodlite has been shut down")
                                                          : stop_reason_.message()) +
                                       "; cannot run '" + name + "'"));
      return handle;
    }
    if (table_.count(name)) {
      handle->complete(Status::DuplicateName("a collective named '" + name + "' is already in flight on rank " +
                                             std::to_string(mpi_.rank()) +
                                             "; wait for it to complete or use another name"));
      return handle;
    }
    entry->request.rank = mpi_.rank();
    entry->enqueued = std::chrono::steady_clock::now();
    wake = queue_.empty();
    queue_.push_back(entry->request);
    table_.emplace(name, std::move(entry));
  }
  // One wake-up per batch: a non-empty queue has already woken the background
  // thread (it drains the whole queue), so later enqueues only add to it.
  if (wake) cv_.notify_one();
  return handle;
}

std::vector<HandlePtr> Runtime::enqueue_group(std::vector<std::unique_ptr<TensorEntry>> entries) {
  std::vector<HandlePtr> handles;
  for (const auto& e : entries) handles.push_back(e->handle);
  Status failure;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) {
      failure = Status::Aborted((stop_reason_.ok() ? std::string("horovodlite has been shut down")
                                                   : stop_reason_.message()) +
                                "; cannot run the grouped op of '" + entries[0]->request.name + "'");
    }
    for (size_t i = 0; failure.ok() && i < entries.size(); ++i) {
      const std::string& name = entries[i]->request.name;
      bool twice = false;
      for (size_t j = 0; j < i; ++j) twice = twice || entries[j]->request.name == name;
      if (table_.count(name) || twice) {
        failure = Status::DuplicateName("a collective named '" + name + "' is already in flight on rank " +
                                        std::to_string(mpi_.rank()) + (twice ? " (twice in this group)" : "") +
                                        "; the grouped op is not run");
      }
    }
    if (failure.ok()) {
      const auto now = std::chrono::steady_clock::now();
      for (auto& e : entries) {
        e->request.rank = mpi_.rank();
        e->enqueued = now;
        queue_.push_back(e->request);
        const std::string name = e->request.name;
        table_.emplace(name, std::move(e));
      }
    }
  }
  if (!failure.ok()) {
    for (const HandlePtr& h : handles) h->complete(failure);
    return handles;
  }
  cv_.notify_one();
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
  const auto cycle_time = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double, std::milli>(config_.cycle_time_ms));
  auto last = std::chrono::steady_clock::now();
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_until(lock, last + cycle_time, [this] { return !queue_.empty() || shutdown_requested_; });
    }
    last = std::chrono::steady_clock::now();
    if (!cycle()) break;
  }
}

bool Runtime::cycle() {
  ++counters_.cycles;
  Controller::Input in;
  {
    std::lock_guard<std::mutex> lock(mu_);
    in.requests.swap(queue_);
    in.shutdown = shutdown_requested_;
    in.exiting = exiting_;
  }
  Controller::Output out;
  const Status s = controller_->compute_responses(std::move(in), &out);
  if (!s.ok()) {
    record_job_failure(s.message());  // (before waking the waiters) exit must not wait for unreachable peers
    abort_all(s);
    return false;
  }
  const Clock::time_point ready = Clock::now();
  for (const Response& r : out.responses) run(r, ready);
  if (out.shutdown) {
    abort_all(Status::Aborted(shutdown_message(out.shutdown_ranks, out.exiting_ranks)));
    return false;
  }
  return true;
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

bool Runtime::find_local(const std::string& name, Request* request, Clock::time_point* enqueued) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = table_.find(name);
  if (it == table_.end()) return false;
  if (request) *request = it->second->request;
  if (enqueued) *enqueued = it->second->enqueued;
  return true;
}

void Runtime::run(const Response& r, Clock::time_point ready) {
  std::vector<TensorEntry*> entries(r.names.size(), nullptr);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < r.names.size(); ++i) {
      auto it = table_.find(r.names[i]);
      if (it != table_.end()) entries[i] = it->second.get();
    }
  }
  OpResult result;
  const bool needs_local = r.type == OpType::kAllgather || r.type == OpType::kBroadcast ||
                           r.type == OpType::kAlltoall || r.type == OpType::kReducescatter;
  if (needs_local && entries[0] == nullptr) {
    result.status = Status::Internal("rank " + std::to_string(mpi_.rank()) + " has no tensor for '" + r.names[0] + "'");
    HVL_LOG(kError, result.status.message());
  } else {
    const bool timeline_on = timeline_.active();
    executor_->set_observer(timeline_on ? &observer_ : nullptr);
    observer_.saw_phase = false;
    if (watchdog_) watchdog_->enter(std::string(op_type_name(r.type)) + " of '" + r.names[0] + "'");
    const Clock::time_point start = Clock::now();
    result = executor_->execute(r, entries);
    const Clock::time_point end = Clock::now();
    if (watchdog_) watchdog_->leave();
    if (timeline_on) {
      const std::string op = Timeline::upper(op_type_name(r.type));
      const std::string collective = result.algorithm;
      for (const std::string& name : r.names) {
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
  if (!s.ok() && r.type != OpType::kError) HVL_LOG(kWarning, "collective on '" << r.names[0] << "' failed: " << s.message());

  // Remove the entries before completing them, so that a waiter may reuse the name at once.
  std::vector<std::unique_ptr<TensorEntry>> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& name : r.names) {
      auto it = table_.find(name);
      if (it == table_.end()) continue;
      done.push_back(std::move(it->second));
      table_.erase(it);
    }
  }
  // Device ops complete once the device has finished (on the device's completion thread).
  if (result.deferred) {
    result.deferred->complete(std::move(done), s);
  } else {
    for (auto& e : done) e->handle->complete(s);
  }
}

void Runtime::abort_all(const Status& status) {
  std::unordered_map<std::string, std::unique_ptr<TensorEntry>> table;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    stop_reason_ = status;
    table.swap(table_);
    queue_.clear();
  }
  controller_->clear();
  for (auto& kv : table) kv.second->handle->complete(status);
}

}  // namespace horovodlite
