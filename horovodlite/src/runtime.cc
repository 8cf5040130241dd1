#include "runtime.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <sstream>
#include <type_traits>
#include <unordered_set>

#include "job_failure.h"
#include "logging.h"

namespace horovodlite {

namespace {
// Flag bits in word 0 of the cycle's bit vector (OR-reduced).
constexpr uint64_t kFlagShutdown = 1u << 0;
constexpr uint64_t kFlagUncached = 1u << 1;
constexpr uint64_t kFlagJoined = 1u << 2;

using Clock = std::chrono::steady_clock;

std::string upper(const char* s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// The collective the executor runs for a response, as the timeline names it.
std::string collective_name(const Response& r, const Executor& executor) {
  if (r.device != kCpuDevice && r.type != OpType::kError) return executor.last_algorithm();
  switch (r.type) {
    case OpType::kAllreduce: return executor.last_algorithm();
    case OpType::kAllgather: return "MPI_ALLGATHERV";
    case OpType::kBroadcast: return "MPI_BCAST";
    case OpType::kAlltoall: return "MPI_ALLTOALLV";
    case OpType::kReducescatter: return "MPI_REDUCE_SCATTER";
    default: return "";
  }
}

// Ranks whose bit is set in a bitmap of ceil(size / 64) words.
std::vector<int> ranks_in(const uint64_t* bitmap, int size) {
  std::vector<int> out;
  for (int r = 0; r < size; ++r)
    if (bitmap[r / 64] & (uint64_t(1) << (r % 64))) out.push_back(r);
  return out;
}
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
  if (rt->mpi_.rank() == 0) rt->coordinator_ = std::make_unique<Coordinator>(rt->mpi_.size());
  rt->cache_.set_capacity(static_cast<size_t>(rt->config_.cache_capacity));
  rt->executor_ = std::make_unique<Executor>(rt->mpi_, rt->config_);
  rt->stall_ = std::make_unique<StallInspector>(rt->config_);
  if (!rt->config_.timeline_path.empty()) {
    // Only rank 0 opens the file; every rank learns the outcome, so that init
    // fails everywhere or nowhere (init is collective: no rank is left waiting).
    Status ts = rt->start_timeline(rt->config_.timeline_path, rt->config_.timeline_mark_cycles);
    int ok = ts.ok() ? 1 : 0;
    HVL_RETURN_IF_ERROR(mpi_status(MPI_Bcast(&ok, 1, MPI_INT, 0, rt->mpi_.comm()), "MPI_Bcast"));
    if (!ok) {
      return Status::InvalidArgument("HOROVODLITE_TIMELINE: " +
                                     (ts.ok() ? "rank 0 cannot open '" + rt->config_.timeline_path + "'"
                                              : ts.message()));
    }
  }
  rt->watchdog_ = std::make_unique<Watchdog>(
      rt->config_.peer_timeout_s, [r = rt.get()](const std::string& step, double waited) { r->on_peer_timeout(step, waited); });
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
  s.negotiations = counters_.negotiations;
  s.cache_hits = counters_.cache_hits;
  s.tensors_negotiated = counters_.tensors_negotiated;
  s.responses_executed = counters_.responses_executed;
  s.fused_tensors = counters_.fused_tensors;
  s.errors = counters_.errors;
  return s;
}

HandlePtr Runtime::enqueue(std::unique_ptr<TensorEntry> entry) {
  HandlePtr handle = entry->handle;
  const std::string name = entry->request.name;
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
    queue_.push_back(entry->request);
    table_.emplace(name, std::move(entry));
  }
  cv_.notify_one();
  return handle;
}

void Runtime::loop() {
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
  std::vector<Request> fresh;
  bool want_shutdown, exiting;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fresh.swap(queue_);
    want_shutdown = shutdown_requested_;
    exiting = exiting_;
  }
  const Clock::time_point now = Clock::now();
  const int rank = mpi_.rank(), size = mpi_.size();
  const bool timeline_on = timeline_.active();
  const bool cache_on = cache_.capacity() > 0;
  for (Request& q : fresh) {
    if (timeline_on) {
      timeline_.negotiate_start(q.name, upper(op_type_name(q.type)).c_str(), now);
      timeline_.rank_ready(q.name, rank, now);
    }
    if (q.type == OpType::kJoin) joined_ = true;
    if (cache_on && q.type != OpType::kJoin && q.type != OpType::kBarrier) {
      pending_cached_.push_back(Waiting{std::move(q), now});
    } else {
      uncached_.push_back(std::move(q));
    }
  }
  if (coordinator_) inspect_stalls(now);

  // One bitwise-AND allreduce decides the cycle: word 0 holds flags, then a rank
  // bitmap of ranks asking to shut down and one of ranks exiting without
  // shutdown(), then one bit per cache position for "invalidate" (all of these
  // OR-reduced, so sent inverted: OR(x) = ~AND(~x)), then one bit per position for
  // "this rank has a hit".
  const size_t words = (cache_.capacity() + 63) / 64;
  const size_t rank_words = (static_cast<size_t>(size) + 63) / 64;
  bits_.assign(1 + 2 * rank_words + 2 * words, 0);
  uint64_t* requesters = bits_.data() + 1;
  uint64_t* exiters = requesters + rank_words;
  uint64_t* invalid = exiters + rank_words;
  uint64_t* hits = invalid + words;
  const size_t or_words = 1 + 2 * rank_words + words;  // the inverted prefix
  std::vector<Waiting> still;
  for (Waiting& w : pending_cached_) {
    uint32_t pos = 0;
    switch (cache_.lookup(w.request, &pos)) {
      case ResponseCache::Lookup::kMiss:
        uncached_.push_back(std::move(w.request));
        break;
      case ResponseCache::Lookup::kHit:
        if (stall_->should_uncache(w.since, now)) {
          // Waited long for the other ranks: send it through the coordinator,
          // where the stall inspector can see which ranks are missing.
          HVL_LOG(kDebug, "'" << w.request.name << "' waited for a cache hit; renegotiating it");
          invalid[pos / 64] |= uint64_t(1) << (pos % 64);
        } else {
          hits[pos / 64] |= uint64_t(1) << (pos % 64);
        }
        still.push_back(std::move(w));
        break;
      case ResponseCache::Lookup::kInvalid:
        invalid[pos / 64] |= uint64_t(1) << (pos % 64);
        still.push_back(std::move(w));
        break;
    }
  }
  pending_cached_.swap(still);
  if (stall_shutdown_) want_shutdown = true;
  uint64_t flags = 0;
  if (want_shutdown) {
    flags |= kFlagShutdown;
    requesters[rank / 64] |= uint64_t(1) << (rank % 64);
  }
  if (exiting) exiters[rank / 64] |= uint64_t(1) << (rank % 64);
  if (!uncached_.empty() || !stall_failures_.empty()) flags |= kFlagUncached;
  if (joined_) flags |= kFlagJoined;
  bits_[0] = flags;
  for (size_t w = 0; w < or_words; ++w) bits_[w] = ~bits_[w];
  MPI_Request req;
  watchdog_->enter("negotiation (bit-vector allreduce)");
  Status s = mpi_status(MPI_Iallreduce(MPI_IN_PLACE, bits_.data(), static_cast<int>(bits_.size()), MPI_UINT64_T,
                                       MPI_BAND, mpi_.comm(), &req),
                        "MPI_Iallreduce");
  if (s.ok()) s = mpi_wait(&req, "MPI_Iallreduce (negotiation)");
  watchdog_->leave();
  if (!s.ok()) {
    const Status lost = Status::Aborted("horovodlite lost contact with other ranks: " + s.message());
    record_job_failure(lost.message());  // (before waking the waiters) exit must not wait for unreachable peers
    abort_all(lost);
    return false;
  }
  for (size_t w = 0; w < or_words; ++w) bits_[w] = ~bits_[w];
  flags = bits_[0];

  std::vector<Response> responses;
  if (flags & kFlagJoined) {
    // A joined rank cannot set hit bits: send everything through the coordinator.
    for (Waiting& w : pending_cached_) uncached_.push_back(std::move(w.request));
    pending_cached_.clear();
  } else if (words > 0) {
    for (size_t w = 0; w < words; ++w) {
      for (uint64_t b = invalid[w]; b; b &= b - 1) cache_.erase(static_cast<uint32_t>(w * 64 + __builtin_ctzll(b)));
    }
    std::unordered_set<std::string> hit_names;
    for (size_t w = 0; w < words; ++w) {
      for (uint64_t b = hits[w] & ~invalid[w]; b; b &= b - 1) {
        const Response& r = cache_.get(static_cast<uint32_t>(w * 64 + __builtin_ctzll(b)));
        hit_names.insert(r.names[0]);
        responses.push_back(r);
      }
    }
    if (!hit_names.empty()) {
      counters_.cache_hits += hit_names.size();
      pending_cached_.erase(std::remove_if(pending_cached_.begin(), pending_cached_.end(),
                                           [&](const Waiting& w) { return hit_names.count(w.request.name) > 0; }),
                            pending_cached_.end());
    }
  }

  std::vector<Response> negotiated;
  if (flags & (kFlagUncached | kFlagJoined)) {
    ++counters_.negotiations;
    watchdog_->enter("negotiation (gather/broadcast of requests)");
    s = negotiate(&negotiated);
    watchdog_->leave();
    if (!s.ok()) {
      HVL_LOG(kError, "negotiation failed: " << s.message());
      const Status lost = Status::Aborted("horovodlite negotiation failed: " + s.message());
      record_job_failure(lost.message());  // (before waking the waiters) exit must not wait for unreachable peers
      abort_all(lost);
      return false;
    }
    counters_.tensors_negotiated += negotiated.size();
    cache_negotiated(negotiated);
    responses.insert(responses.end(), negotiated.begin(), negotiated.end());
  }

  const Clock::time_point ready = Clock::now();
  if (timeline_on) {
    if (!responses.empty()) timeline_.cycle_start(now);
    for (const Response& r : responses)
      for (const std::string& name : r.names) timeline_.negotiate_end(name, ready);
  }
  for (const Response& r : fuse_responses(responses, config_.fusion_threshold_bytes)) run(r, ready);

  if (flags & kFlagShutdown) {
    abort_all(Status::Aborted(shutdown_message(ranks_in(requesters, size), ranks_in(exiters, size))));
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

void Runtime::inspect_stalls(Clock::time_point now) {
  if (!stall_->due(now)) return;
  auto local_since = [this](const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = table_.find(name);
    return it == table_.end() ? Clock::time_point::max() : it->second->enqueued;
  };
  StallInspector::Report report = stall_->check(coordinator_->pending(), local_since, now);
  if (!report.warning.empty()) HVL_LOG(kWarning, report.warning);
  for (Response& r : report.failures) {
    HVL_LOG(kError, r.error_message);
    coordinator_->drop(r.names[0]);
    if (stall_reason_.empty()) stall_reason_ = r.error_message;
    stall_failures_.push_back(std::move(r));
    // This cycle carries the errors to every rank and then shuts down everywhere.
    stall_shutdown_ = true;
  }
}

void Runtime::cache_negotiated(const std::vector<Response>& negotiated) {
  if (cache_.capacity() == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (const Response& r : negotiated) {
    if (!ResponseCache::cacheable(r.type)) continue;
    auto it = table_.find(r.names[0]);
    cache_.put(r, it == table_.end() ? nullptr : &it->second->request);
  }
}

Status Runtime::negotiate(std::vector<Response>* out) {
  const int rank = mpi_.rank(), size = mpi_.size();
  MPI_Comm comm = mpi_.comm();
  send_buf_.clear();
  encode_requests(uncached_, &send_buf_);
  uncached_.clear();

  int len = static_cast<int>(send_buf_.size());
  std::vector<int> lens(rank == 0 ? size : 0), displs(rank == 0 ? size : 0);
  MPI_Request req;
  HVL_RETURN_IF_ERROR(mpi_status(MPI_Igather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, comm, &req), "MPI_Igather"));
  HVL_RETURN_IF_ERROR(mpi_wait(&req, "MPI_Igather"));
  if (rank == 0) {
    int64_t total = 0;
    for (int r = 0; r < size; ++r) {
      displs[r] = static_cast<int>(total);
      total += lens[r];
    }
    recv_buf_.resize(static_cast<size_t>(total));
  }
  HVL_RETURN_IF_ERROR(mpi_status(MPI_Igatherv(send_buf_.data(), len, MPI_BYTE, recv_buf_.data(), lens.data(),
                                              displs.data(), MPI_BYTE, 0, comm, &req),
                                 "MPI_Igatherv"));
  HVL_RETURN_IF_ERROR(mpi_wait(&req, "MPI_Igatherv"));

  int64_t resp_len = 0;
  if (rank == 0) {
    std::vector<Request> requests;
    for (int r = 0; r < size; ++r) {
      Status d = decode_requests(reinterpret_cast<const uint8_t*>(recv_buf_.data()) + displs[r],
                                 static_cast<size_t>(lens[r]), &requests);
      if (!d.ok()) {
        HVL_LOG(kError, "ignoring a malformed request list from rank " << r << ": " << d.message());
        continue;
      }
      if (r != 0 && timeline_.active()) {  // rank 0 marked its own requests when it drained them
        const Clock::time_point t = Clock::now();
        for (const Request& q : requests) {
          timeline_.negotiate_start(q.name, upper(op_type_name(q.type)).c_str(), t);
          timeline_.rank_ready(q.name, r, t);
        }
      }
      coordinator_->add(r, requests);
    }
    std::vector<Response> ready = coordinator_->take_ready();
    if (!stall_failures_.empty()) {
      ready.insert(ready.end(), stall_failures_.begin(), stall_failures_.end());
      stall_failures_.clear();
    }
    send_buf_.clear();
    encode_responses(ready, &send_buf_);
    resp_len = static_cast<int64_t>(send_buf_.size());
  }
  HVL_RETURN_IF_ERROR(mpi_status(MPI_Ibcast(&resp_len, 1, MPI_INT64_T, 0, comm, &req), "MPI_Ibcast"));
  HVL_RETURN_IF_ERROR(mpi_wait(&req, "MPI_Ibcast"));
  if (rank != 0) send_buf_.resize(static_cast<size_t>(resp_len));
  HVL_RETURN_IF_ERROR(
      mpi_status(MPI_Ibcast(send_buf_.data(), static_cast<int>(resp_len), MPI_BYTE, 0, comm, &req), "MPI_Ibcast"));
  HVL_RETURN_IF_ERROR(mpi_wait(&req, "MPI_Ibcast"));
  return decode_responses(reinterpret_cast<const uint8_t*>(send_buf_.data()), send_buf_.size(), out);
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
  Status s;
  const bool needs_local = r.type == OpType::kAllgather || r.type == OpType::kBroadcast ||
                           r.type == OpType::kAlltoall || r.type == OpType::kReducescatter;
  if (needs_local && entries[0] == nullptr) {
    s = Status::Internal("rank " + std::to_string(mpi_.rank()) + " has no tensor for '" + r.names[0] + "'");
    HVL_LOG(kError, s.message());
  } else {
    const bool timeline_on = timeline_.active();
    executor_->set_observer(timeline_on ? &observer_ : nullptr);
    observer_.saw_phase = false;
    if (watchdog_) watchdog_->enter(std::string(op_type_name(r.type)) + " of '" + r.names[0] + "'");
    const Clock::time_point start = Clock::now();
    s = executor_->execute(r, entries);
    const Clock::time_point end = Clock::now();
    if (watchdog_) watchdog_->leave();
    if (timeline_on) {
      const std::string op = upper(op_type_name(r.type));
      const std::string collective = collective_name(r, *executor_);
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
  if (r.type == OpType::kJoin) {
    joined_ = false;
    if (entries[0]) entries[0]->handle->set_last_joined_rank(r.last_joined_rank);
  }
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
  // Device ops complete once the device has finished (the executor's completion thread).
  if (!executor_->defer_completion(&done, s)) {
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
  pending_cached_.clear();
  uncached_.clear();
  for (auto& kv : table) kv.second->handle->complete(status);
}

}  // namespace horovodlite
