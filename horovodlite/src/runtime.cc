#include "runtime.h"

#include <algorithm>
#include <chrono>
#include <unordered_set>

#include "logging.h"

namespace horovodlite {

namespace {
// Flag bits in word 0 of the cycle's bit vector (OR-reduced).
constexpr uint64_t kFlagShutdown = 1u << 0;
constexpr uint64_t kFlagUncached = 1u << 1;
constexpr uint64_t kFlagJoined = 1u << 2;
}  // namespace

Status Runtime::start(const InitOptions& options, std::shared_ptr<Runtime>* out) {
  std::shared_ptr<Runtime> rt(new Runtime());
  HVL_RETURN_IF_ERROR(Config::from_env(&rt->config_));
  set_log_level(rt->config_.log_level);
  HVL_RETURN_IF_ERROR(rt->mpi_.init(static_cast<const MPI_Comm*>(options.mpi_comm)));
  set_log_rank(rt->mpi_.rank());
  if (rt->mpi_.rank() == 0) rt->coordinator_ = std::make_unique<Coordinator>(rt->mpi_.size());
  rt->cache_.set_capacity(static_cast<size_t>(rt->config_.cache_capacity));
  rt->executor_ = std::make_unique<Executor>(rt->mpi_, rt->config_);
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

Status Runtime::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_requested_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  mpi_.release();
  std::lock_guard<std::mutex> lock(mu_);
  return stop_reason_.code() == StatusCode::kAborted ? Status::OK() : stop_reason_;
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
      handle->complete(Status::Aborted("horovodlite has been shut down; cannot run '" + name + "'"));
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
  bool want_shutdown;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fresh.swap(queue_);
    want_shutdown = shutdown_requested_;
  }
  const bool cache_on = cache_.capacity() > 0;
  for (Request& q : fresh) {
    if (q.type == OpType::kJoin) joined_ = true;
    if (cache_on && q.type != OpType::kJoin && q.type != OpType::kBarrier) {
      pending_cached_.push_back(std::move(q));
    } else {
      uncached_.push_back(std::move(q));
    }
  }

  // One bitwise-AND allreduce decides the cycle: word 0 holds flags, then one bit
  // per cache position for "invalidate" (both OR-reduced, so sent inverted:
  // OR(x) = ~AND(~x)), then one bit per position for "this rank has a hit".
  const size_t words = (cache_.capacity() + 63) / 64;
  bits_.assign(1 + 2 * words, 0);
  uint64_t* invalid = bits_.data() + 1;
  uint64_t* hits = bits_.data() + 1 + words;
  std::vector<Request> still;
  for (Request& q : pending_cached_) {
    uint32_t pos = 0;
    switch (cache_.lookup(q, &pos)) {
      case ResponseCache::Lookup::kMiss:
        uncached_.push_back(std::move(q));
        break;
      case ResponseCache::Lookup::kHit:
        hits[pos / 64] |= uint64_t(1) << (pos % 64);
        still.push_back(std::move(q));
        break;
      case ResponseCache::Lookup::kInvalid:
        invalid[pos / 64] |= uint64_t(1) << (pos % 64);
        still.push_back(std::move(q));
        break;
    }
  }
  pending_cached_.swap(still);
  uint64_t flags = 0;
  if (want_shutdown) flags |= kFlagShutdown;
  if (!uncached_.empty()) flags |= kFlagUncached;
  if (joined_) flags |= kFlagJoined;
  bits_[0] = ~flags;
  for (size_t w = 0; w < words; ++w) invalid[w] = ~invalid[w];
  MPI_Request req;
  Status s = mpi_status(MPI_Iallreduce(MPI_IN_PLACE, bits_.data(), static_cast<int>(bits_.size()), MPI_UINT64_T,
                                       MPI_BAND, mpi_.comm(), &req),
                        "MPI_Iallreduce");
  if (s.ok()) s = mpi_wait(&req, "MPI_Iallreduce (negotiation)");
  if (!s.ok()) {
    abort_all(Status::Aborted("horovodlite lost contact with other ranks: " + s.message()));
    return false;
  }
  flags = ~bits_[0];
  for (size_t w = 0; w < words; ++w) invalid[w] = ~invalid[w];

  std::vector<Response> responses;
  if (flags & kFlagJoined) {
    // A joined rank cannot set hit bits: send everything through the coordinator.
    for (Request& q : pending_cached_) uncached_.push_back(std::move(q));
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
                                           [&](const Request& q) { return hit_names.count(q.name) > 0; }),
                            pending_cached_.end());
    }
  }

  std::vector<Response> negotiated;
  if (flags & (kFlagUncached | kFlagJoined)) {
    ++counters_.negotiations;
    s = negotiate(&negotiated);
    if (!s.ok()) {
      HVL_LOG(kError, "negotiation failed: " << s.message());
      abort_all(Status::Aborted("horovodlite negotiation failed: " + s.message()));
      return false;
    }
    counters_.tensors_negotiated += negotiated.size();
    cache_negotiated(negotiated);
    responses.insert(responses.end(), negotiated.begin(), negotiated.end());
  }

  for (const Response& r : fuse_responses(responses, config_.fusion_threshold_bytes)) run(r);

  if (flags & kFlagShutdown) {
    abort_all(Status::Aborted("horovodlite has been shut down"));
    return false;
  }
  return true;
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
      coordinator_->add(r, requests);
    }
    send_buf_.clear();
    encode_responses(coordinator_->take_ready(), &send_buf_);
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

void Runtime::run(const Response& r) {
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
    s = executor_->execute(r, entries);
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
  for (auto& e : done) e->handle->complete(s);
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
