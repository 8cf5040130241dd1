#include "runtime.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

#ifdef __linux__
#include <pthread.h>
#include <sys/prctl.h>
#endif

#include "host_memory.h"
#include "job_failure.h"
#include "logging.h"
#include "thread_affinity.h"
#include "transport/world.h"

namespace horovodlite {

Status Runtime::start(const InitOptions& options, std::shared_ptr<Runtime>* out) {
  std::shared_ptr<Runtime> rt(new Runtime());
  HVL_RETURN_IF_ERROR(Config::from_env(&rt->config_));
  set_log_level(rt->config_.log_level);
  const FreedMemory freed = keep_freed_memory(rt->config_.keep_freed_memory);
  HVL_LOG(kDebug, "freed host memory: " << freed_memory_name(freed));
  set_huge_page_inputs(rt->config_.huge_page_inputs);
  HVL_RETURN_IF_ERROR(rt->join_world(options));
  set_log_rank(rt->world_.rank());
  HVL_RETURN_IF_ERROR(rt->agree_on_settings());
  rt->watchdog_ = std::make_unique<Watchdog>(
      rt->config_.peer_timeout_s,
      [r = rt.get()](const std::string& step, double waited) { r->on_peer_timeout(step, waited); });
  // Host names, so that the watchdog names the peer a ring waited for.
  HVL_RETURN_IF_ERROR(rt->watchdog_->learn_peers(rt->world_));
  rt->sets_ = std::make_unique<ProcessSetTable>(rt->world_, rt->config_, rt->timeline_, *rt->watchdog_);
  rt->sets_->add_global();
  if (rt->config_.autotune) rt->start_autotuner();
  // Static process sets: collective over every rank, before the thread starts.
  for (const std::vector<int>& ranks : options.process_sets) {
    int32_t id = 0;
    Status ps = rt->sets_->register_set(ranks, &id);
    if (!ps.ok()) return rt->fail_start(Status(ps.code(), "init(process_sets): " + ps.message()));
  }
  int cpu = -1;
  Status placed = rt->agree_on_thread_cpu(&cpu);
  if (!placed.ok()) return rt->fail_start(Status(placed.code(), "init: " + placed.message()));
  rt->start_thread(cpu);
  HVL_LOG(kDebug, "started: size " << rt->world_.size() << ", fusion threshold " << rt->config_.fusion_threshold_bytes
                                   << " B, cycle time " << rt->config_.cycle_time_ms << " ms, cache capacity "
                                   << rt->config_.cache_capacity);
  *out = std::move(rt);
  return Status::OK();
}

Status Runtime::join_world(const InitOptions& options) {
  if (options.store) {
    if (options.mpi_comm != nullptr) {
      return Status::InvalidArgument("init: InitOptions::store and InitOptions::mpi_comm both given: one world");
    }
    if (options.store_size < 1 || options.store_rank < 0 || options.store_rank >= options.store_size) {
      return Status::InvalidArgument("init: InitOptions::store_rank " + std::to_string(options.store_rank) +
                                     " of store_size " + std::to_string(options.store_size));
    }
    Config::GlooJob& g = config_.gloo;
    config_.transport = Config::Transport::kGloo;
    g.rank = options.store_rank;
    g.size = options.store_size;
    g.hostname = options.store_node;
    g.secret = options.store_secret;
    g.store = options.store;
  } else if (!config_.launcher_refusal.empty()) {
    return Status::Precondition(config_.launcher_refusal);
  }
  if (config_.transport != Config::Transport::kGloo) return world_.init_mpi(options.mpi_comm);
  // A job without MPI: the world comes from the launcher's rendezvous store.
  if (options.mpi_comm != nullptr) {
    return Status::InvalidArgument(
        "init: an MPI communicator was passed (InitOptions::mpi_comm) but this is a Gloo job "
        "(HOROVOD_CONTROLLER=gloo or started by horovodlite-run --gloo)");
  }
  transport::clear_interrupt();  // a wait interrupted in the last runtime (on_peer_timeout)
  transport::ContextPtr world;
  HVL_RETURN_IF_ERROR(transport::connect_world(config_, &world));
  return world_.init_transport(std::move(world));
}

Status Runtime::fail_start(const Status& failure) {
  Status stopped = stop();
  if (!stopped.ok()) HVL_LOG(kWarning, "stopping after a failed init: " << stopped.message());
  return failure;
}

void Runtime::start_autotuner() {
  const Config& c = config_;
  autotune::Options o;
  o.log_path = c.autotune_log;
  o.warmup_samples = static_cast<int>(c.autotune_warmup_samples);
  o.steps_per_sample = static_cast<int>(c.autotune_steps_per_sample);
  o.max_samples = static_cast<int>(c.autotune_bayes_opt_max_samples);
  o.gp_noise = c.autotune_gaussian_process_noise;
  o.tune_fusion = !c.user_set.fusion_threshold;
  o.tune_cycle_time = !c.user_set.cycle_time;
  o.tune_eager = !c.user_set.eager_allreduce_bytes;
  // The hierarchical switches (on: every size; off: never) where their
  // algorithms apply (several hosts, the same number of ranks on each; the
  // same answer on every rank). They start on (auto, the default, uses them
  // for the large allreduces that carry most of the bytes) unless
  // AUTOTUNE_START says off.
  bool hosts = false;
  if (!c.user_set.hierarchical_allreduce || !c.user_set.hierarchical_allgather) {
    Status topology = world_.several_hosts_alike(&hosts);
    if (!topology.ok()) HVL_LOG(kWarning, "autotune: the hierarchical switches stay as set: " << topology.message());
  }
  o.tune_hierarchical_allreduce = hosts && !c.user_set.hierarchical_allreduce;
  o.tune_hierarchical_allgather = hosts && !c.user_set.hierarchical_allgather;
  autotune::Params initial;
  initial.fusion_threshold_bytes = c.fusion_threshold_bytes;
  initial.cycle_time_ms = c.cycle_time_ms;
  initial.eager_allreduce_bytes = c.eager_allreduce_bytes;
  using H = Config::Hierarchical;
  initial.hierarchical_allreduce =
      o.tune_hierarchical_allreduce ? c.hierarchical_allreduce != H::kOff : c.hierarchical_allreduce == H::kOn;
  initial.hierarchical_allgather =
      o.tune_hierarchical_allgather ? c.hierarchical_allgather != H::kOff : c.hierarchical_allgather == H::kOn;
  tuner_ = std::make_unique<autotune::Autotuner>(o, initial, world_.rank() == 0);
  apply_tuning(initial);  // (a tuned switch: from auto to on)
  if (!tuner_->active() && world_.rank() == 0) {
    HVL_LOG(kWarning,
            "HOROVODLITE_AUTOTUNE=1: nothing to tune (FUSION_THRESHOLD, CYCLE_TIME and "
            "EAGER_ALLREDUCE_BYTES are all set by hand, and the hierarchical switches are set by hand "
            "or do not apply)");
  }
}

Status Runtime::agree_on_thread_cpu(int* cpu) {
  // Checked on every rank before the thread starts: a bad list fails init
  // everywhere. auto counts the ranks of this machine that share this
  // process's CPUs.
  ThreadAffinity affinity;
  const std::vector<int> allowed = allowed_cpus();
  const uint64_t key = cpu_set_key(allowed);
  std::vector<uint64_t> keys(static_cast<size_t>(world_.size()));
  Status s = world_.allgather(&key, sizeof key, keys.data());
  if (s.ok()) s = parse_thread_affinity(config_.thread_affinity_var, config_.thread_affinity, &affinity);
  if (s.ok()) {
    s = background_thread_cpu(affinity, world_.local_rank(), world_.local_size(), cpu_sharers(keys, world_.rank()),
                              allowed, cpu);
  }
  return world_.agree(s, "the background thread's CPU", "its THREAD_AFFINITY setting was refused there");
}

void Runtime::start_thread(int cpu) {
  thread_ = std::thread([this] { loop(); });
#ifdef __linux__
  pthread_setname_np(thread_.native_handle(), "horovodlite");  // as ps and /proc/<pid>/task show it
#endif
  if (cpu < 0) return;
  const Status pinned = pin_thread(thread_, cpu);
  if (pinned.ok()) {
    HVL_LOG(kDebug, "background thread of local rank " << world_.local_rank() << " on CPU " << cpu);
  } else {
    HVL_LOG(kWarning, pinned.message() << " (it runs where the kernel puts it)");
  }
}

Status Runtime::agree_on_settings() {
  if (!config_.timeline_path.empty()) {
    // Only rank 0 opens the file; every rank learns the outcome, so that init
    // fails everywhere or nowhere (init is collective: no rank is left waiting).
    Status ts = start_timeline(config_.timeline_path, config_.timeline_mark_cycles);
    int32_t ok = ts.ok() ? 1 : 0;
    HVL_RETURN_IF_ERROR(world_.broadcast(&ok, sizeof(ok), 0));
    if (!ok) {
      return Status::InvalidArgument("HOROVODLITE_TIMELINE: " +
                                     (ts.ok() ? "rank 0 cannot open '" + config_.timeline_path + "'" : ts.message()));
    }
  }
  // The bit vector's size and the eager slots follow these: every rank must agree.
  int64_t v[4] = {config_.cache_capacity, -config_.cache_capacity, config_.eager_allreduce_bytes,
                  -config_.eager_allreduce_bytes};
  HVL_RETURN_IF_ERROR(world_.max_int64(v, 4));
  if (v[0] != -v[1] || v[2] != -v[3]) {
    const bool cache = v[0] != -v[1];
    return Status::InvalidArgument(
        std::string(cache ? "HOROVODLITE_CACHE_CAPACITY" : "HOROVODLITE_EAGER_ALLREDUCE_BYTES") +
        " must be the same on every rank; the ranks set values from " + std::to_string(cache ? -v[1] : -v[3]) + " to " +
        std::to_string(cache ? v[0] : v[2]));
  }
  return Status::OK();
}

Runtime::~Runtime() {
  if (thread_.joinable()) {
    const Status s = stop();
    if (!s.ok()) HVL_LOG(kDebug, "stopped: " << s.message());
  }
}

Status Runtime::stop(bool exiting) {
  if (exiting) exiting_ = true;
  shutdown_requested_ = true;
  if (sets_) sets_->wake();
  if (thread_.joinable()) thread_.join();
  if (sets_) sets_->destroy_process_sets();
  watchdog_.reset();
  Status closed = timeline_.stop();
  if (!closed.ok()) HVL_LOG(kWarning, "timeline: " << closed.message());
  world_.release();
  const Status reason = sets_ ? sets_->close_reason() : Status::OK();
  return reason.code() == StatusCode::kAborted ? Status::OK() : reason;
}

void Runtime::request_stop() {
  shutdown_requested_ = true;
  sets_->wake();
}

Status Runtime::start_timeline(const std::string& path, bool mark_cycles) {
  if (world_.rank() != 0) return Status::OK();
  return timeline_.start(path, mark_cycles);
}

Status Runtime::stop_timeline() { return timeline_.stop(); }

void Runtime::on_peer_timeout(const std::string& step, double waited_s) {
  std::ostringstream os;
  os << "rank " << world_.rank() << ": no progress for " << static_cast<int>(waited_s) << " s in " << step << ": "
     << world_.stalled_hint() << " (HOROVODLITE_PEER_TIMEOUT_SECONDS=" << config_.peer_timeout_s << ", 0 disables)";
  const Status s = Status::Aborted(os.str());
  HVL_LOG(kError, s.message());
  if (sets_)
    for (auto& e : sets_->close(s)) e->handle->complete(s);
  // Leave a complete file behind (a failure to close it changes nothing now).
  if (!timeline_.stop().ok()) HVL_LOG(kWarning, "could not close the timeline");
  // Interrupts our own waits (the background thread's cycle then fails, the
  // thread ends and shutdown() can join it: an elastic job re-forms without
  // the peer), or ends the job where the wait is MPI's.
  world_.end_stalled_wait(s.message());
}

Stats Runtime::stats() const {
  Stats s;
  s.cycles = counters_.cycles;
  sets_->add_counters(&s);
  s.responses_executed = counters_.responses_executed;
  s.fused_tensors = counters_.fused_tensors;
  s.errors = counters_.errors;
  return s;
}

void Runtime::loop() {
#ifdef __linux__
  // The thread's short sleeps (mpi_wait's back-off while a peer catches up)
  // would otherwise last at least the default 50 us timer slack: with the rank
  // bound to one core (Open MPI's default for np <= 2) that is most of a small
  // allreduce's latency.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
#endif
  auto last = Clock::now();
  // The next cycle starts at once when there is work: new requests, a shutdown,
  // or (after a cycle that took requests or ran responses) this rank's own ops
  // still waiting for other ranks. A cycle that took part of a burst of enqueues
  // leaves the rest pending here while the peers' queues still hold theirs; they
  // start their next cycle at once, and waiting for this rank's cycle timer
  // would hold them (and this burst) for up to a cycle time. An idle cycle (no
  // requests, no responses: a peer is behind, or ranks disagree) does not count,
  // so ops that wait for a slow or stuck peer cycle at the timer's pace, never in
  // a busy loop. A cycle waits for every rank inside its negotiation (mpi_wait).
  while (true) {
    // (Read each time: the autotuner may change it.)
    const auto cycle_time =
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(config_.cycle_time_ms));
    sets_->wait_for_work(last + cycle_time, progressed_, [this] { return shutdown_requested_.load(); });
    last = Clock::now();
    progressed_ = false;
    if (!cycle()) break;
  }
}

bool Runtime::cycle() {
  ++counters_.cycles;
  // The global set first, on every rank: its responses may add or remove sets.
  if (!cycle_set(sets_->global(), /*global=*/true)) return false;
  // Then each set this rank is a member of, ascending by id (see runtime.h: why
  // this cannot deadlock). The list is the same on every rank: sets change only
  // in the global step just run, and only on this thread.
  for (ProcessSetState* set : sets_->member_process_sets())
    if (!cycle_set(*set, /*global=*/false)) return false;
  return true;
}

bool Runtime::cycle_set(ProcessSetState& set, bool global) {
  negotiation::Controller::Input in;
  in.requests = sets_->drain(set);
  // Shutdown is agreed by the global set only (every rank stops in the same cycle).
  in.shutdown = global && shutdown_requested_;
  in.exiting = global && exiting_;
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
      const Status shared = set.controller->share_stall_reason(&stall_reason_);
      if (!shared.ok()) HVL_LOG(kWarning, "could not share the stall reason: " << shared.message());
      abort_all(Status::Aborted(shutdown_message(out.shutdown_ranks, out.exiting_ranks)));
      return false;
    }
    // A stall shutdown in a set: the set's members ask the global set, so that
    // every rank stops at the next cycle.
    shutdown_requested_ = true;
  }
  return true;
}

void Runtime::apply_tuning(const autotune::Params& p) {
  config_.fusion_threshold_bytes = p.fusion_threshold_bytes;
  config_.cycle_time_ms = p.cycle_time_ms;
  config_.eager_allreduce_bytes = p.eager_allreduce_bytes;
  // The hierarchical algorithms read their switch at each response.
  const autotune::Options& tuned = tuner_->options();
  auto hierarchical_mode = [](bool on) { return on ? Config::Hierarchical::kOn : Config::Hierarchical::kOff; };
  if (tuned.tune_hierarchical_allreduce) config_.hierarchical_allreduce = hierarchical_mode(p.hierarchical_allreduce);
  if (tuned.tune_hierarchical_allgather) config_.hierarchical_allgather = hierarchical_mode(p.hierarchical_allgather);
  HVL_LOG(kDebug, "autotune: fusion threshold " << p.fusion_threshold_bytes << " B, cycle time " << p.cycle_time_ms
                                                << " ms, eager allreduce " << p.eager_allreduce_bytes
                                                << " B, hierarchical allreduce " << p.hierarchical_allreduce
                                                << ", allgather " << p.hierarchical_allgather);
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

void Runtime::run(ProcessSetState& set, const Response& r, Clock::time_point ready) {
  const std::vector<TensorEntry*> entries = sets_->lookup(set, r.names);
  OpResult result = execute(set, r, entries, ready);
  if (result.status.ok() && !result.outputs.empty() && result.outputs.size() != entries.size()) {
    result.status =
        Status::Internal(std::string(result.algorithm) + " returned " + std::to_string(result.outputs.size()) +
                         " outputs for the " + std::to_string(entries.size()) + " tensors of '" + r.names[0] + "'");
  }
  account(r, result);
  complete(set, r, entries, std::move(result));
}

OpResult Runtime::execute(ProcessSetState& set, const Response& r, const std::vector<TensorEntry*>& entries,
                          Clock::time_point ready) {
  const bool needs_local = r.type == OpType::kAllgather || r.type == OpType::kBroadcast ||
                           r.type == OpType::kAlltoall || r.type == OpType::kReducescatter;
  const auto missing = std::find(entries.begin(), entries.end(), nullptr);
  if (needs_local && missing != entries.end()) {
    OpResult result(Status::Internal("rank " + std::to_string(world_.rank()) + " has no tensor for '" +
                                     r.names[static_cast<size_t>(missing - entries.begin())] + "'" +
                                     (set.id == 0 ? std::string() : " in " + set.describe())));
    HVL_LOG(kError, result.status.message());
    return result;
  }
  if (r.type == OpType::kBarrier && entries[0] != nullptr && entries[0]->action) {
    // Adding or removing a process set: every rank runs it at this point of the
    // global set's response list (collective over every rank).
    watchdog_->enter("process set change '" + r.names[0] + "'");
    OpResult result(entries[0]->action());
    watchdog_->leave();
    return result;
  }
  Executor& executor = *set.executor;
  executor.set_observer(observer_.begin(set.timeline_prefix()));
  watchdog_->enter(std::string(op_type_name(r.type)) + " of '" + r.names[0] + "'");
  const Clock::time_point start = Clock::now();
  OpResult result = executor.execute(r, entries);
  const Clock::time_point end = Clock::now();
  watchdog_->leave();
  observer_.end(r, result, ready, start, end);
  return result;
}

void Runtime::account(const Response& r, const OpResult& result) {
  if (r.type == OpType::kError && r.error_code == StatusCode::kAborted) {
    // A stall: a peer may be stuck in its own code, so exit must not wait for it
    // (recorded before the waiters wake: they may exit at once).
    record_job_failure(r.error_message);
    if (stall_reason_.empty()) stall_reason_ = r.error_message;  // a stall shutdown follows in the next cycle
  }
  ++counters_.responses_executed;
  if (r.names.size() > 1) counters_.fused_tensors += r.names.size();
  if (r.type == OpType::kError) ++counters_.errors;
  if (!result.status.ok() && r.type != OpType::kError && !result.reported)
    HVL_LOG(kWarning, "collective on '" << r.names[0] << "' failed: " << result.status.message());
}

void Runtime::complete(ProcessSetState& set, const Response& r, const std::vector<TensorEntry*>& entries,
                       OpResult result) {
  // Results first: a waiter reads them once the handle has completed.
  if (r.type == OpType::kJoin && entries[0]) entries[0]->handle->set_last_joined_rank(r.last_joined_rank);
  if (result.status.ok() && !result.outputs.empty()) {
    for (size_t i = 0; i < entries.size(); ++i) {
      if (entries[i] == nullptr) continue;
      OpOutput& out = result.outputs[i];
      entries[i]->handle->set_output(out.tensor);
      if (!out.received_splits.empty()) entries[i]->handle->set_received_splits(std::move(out.received_splits));
    }
  }
  // Remove the entries before completing them, so that a waiter may reuse the name at once.
  std::vector<std::unique_ptr<TensorEntry>> done = sets_->take(set, r.names);
  // Device ops complete once the device has finished (on the device's completion thread).
  if (result.deferred) {
    result.deferred->complete(std::move(done), result.status);
    return;
  }
  // All complete before any waiter wakes: a caller synchronizing a fused
  // batch one handle after the other waits once, not once per tensor.
  for (auto& e : done) e->handle->complete_without_waking(result.status);
  for (auto& e : done) e->handle->wake();
}

void Runtime::abort_all(const Status& status) {
  std::vector<negotiation::Controller*> controllers;
  std::vector<std::unique_ptr<TensorEntry>> entries = sets_->close(status, &controllers);
  for (negotiation::Controller* c : controllers) c->clear();
  for (auto& e : entries) e->handle->complete(status);
}

}  // namespace horovodlite
