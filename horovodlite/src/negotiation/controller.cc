#include "negotiation/controller.h"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <unordered_set>

#include "kernels/reduce.h"
#include "logging.h"
#include "ops/fusion.h"
#include "transport/collectives.h"

namespace horovodlite::negotiation {

Controller::Controller(const Communicator& comm, const Config& config, Timeline& timeline, Watchdog& watchdog,
                       const LocalOps& local, SetIdentity identity)
    : comm_(comm),
      identity_(std::move(identity)),
      config_(config),
      timeline_(timeline),
      watchdog_(watchdog),
      local_(local),
      readiness_(comm.rank == 0 ? std::make_unique<ReadinessTable>(comm.size, identity_.global_ranks, identity_.where)
                                : nullptr),
      wire_(comm.wire),
      exchange_(comm.host_wire ? comm.host_wire : comm.wire, comm.eager_message_bytes),
      cache_(static_cast<size_t>(config.cache_capacity)),
      votes_(static_cast<size_t>(config.cache_capacity), comm.size),
      stall_(config) {}

Status Controller::compute_responses(Input input, Output* out) {
  const Clock::time_point now = Clock::now();
  accept(std::move(input.requests), now);
  if (readiness_) inspect_stalls(now);

  vote(input, now);
  watchdog_.enter("negotiation (bit-vector allreduce)");
  Status s = votes_.sync(exchange_);
  watchdog_.leave();
  if (!s.ok()) return Status::Aborted("horovodlite lost contact with other ranks: " + s.message());

  if (!input.tuning.empty()) {
    const auto* agreed = static_cast<const int64_t*>(votes_.slot_result(eager_.size()));
    out->tuning.assign(agreed, agreed + input.tuning.size());
  }
  out->responses = take_cache_hits();
  if (votes_.test(CycleVote::kUncachedInQueue) || votes_.test(CycleVote::kJoined)) {
    ++negotiations_;
    std::vector<Response> negotiated;
    watchdog_.enter("negotiation (gather/broadcast of requests)");
    s = negotiate(&negotiated);
    watchdog_.leave();
    if (!s.ok()) {
      HVL_LOG(kError, "negotiation failed: " << s.message());
      return Status::Aborted("horovodlite negotiation failed: " + s.message());
    }
    tensors_negotiated_ += negotiated.size();
    cache_negotiated(negotiated);
    out->responses.insert(out->responses.end(), negotiated.begin(), negotiated.end());
  }

  if (timeline_.active()) {
    const Clock::time_point ready = Clock::now();
    if (!out->responses.empty()) timeline_.cycle_start(now);
    for (const Response& r : out->responses)
      for (const std::string& name : r.names) timeline_.negotiate_end(identity_.timeline_prefix + name, ready);
  }
  for (const Response& r : out->responses)
    if (r.type == OpType::kJoin) joined_ = false;  // runs this cycle
  out->responses =
      fuse_responses(std::move(out->responses), config_.fusion_threshold_bytes, config_.disable_group_fusion);
  out->shutdown = votes_.test(CycleVote::kShouldShutDown);
  if (out->shutdown) {
    out->shutdown_ranks = votes_.shutdown_ranks();
    out->exiting_ranks = votes_.exiting_ranks();
  }
  return Status::OK();
}

void Controller::clear() {
  pending_cached_.clear();
  uncached_.clear();
}

void Controller::mark_ready(const Request& q, int rank, Clock::time_point t) {
  const std::string row = identity_.timeline_prefix + q.name;
  timeline_.negotiate_start(row, Timeline::upper(op_type_name(q.type)).c_str(), t);
  timeline_.rank_ready(row, global_rank(rank), t);
}

void Controller::accept(std::vector<Request> requests, Clock::time_point now) {
  const bool timeline_on = timeline_.active();
  const bool cache_on = cache_.capacity() > 0;
  // A group all of whose members arrive in this batch may use the cache; one
  // whose members come in several batches goes to full negotiation.
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> in_batch;  // id -> (count here, group size)
  for (const Request& q : requests) {
    if (q.group_id == 0) continue;
    auto& [count, group_size] = in_batch[q.group_id];
    ++count;
    group_size = q.group_size;
  }
  std::unordered_set<uint64_t> split;
  for (const auto& [id, sizes] : in_batch) {
    const auto [count, group_size] = sizes;
    auto partial = partial_groups_.find(id);
    if (partial != partial_groups_.end()) {
      split.insert(id);
      partial->second -= count;
      if (partial->second <= 0) partial_groups_.erase(partial);
    } else if (count < group_size) {
      split.insert(id);
      partial_groups_[id] = group_size - count;
    }
  }
  for (Request& q : requests) {
    if (timeline_on) mark_ready(q, comm_.rank, now);
    if (q.type == OpType::kJoin) joined_ = true;
    const bool whole_group = q.group_id == 0 || split.count(q.group_id) == 0;
    if (cache_on && whole_group && q.type != OpType::kJoin && q.type != OpType::kBarrier) {
      pending_cached_.push_back(Waiting{std::move(q), now});
    } else {
      uncached_.push_back(std::move(q));
    }
  }
}

std::vector<CycleVote::Slot> Controller::plan_eager() {
  eager_.clear();
  std::vector<CycleVote::Slot> slots;
  if (config_.eager_allreduce_bytes <= 0 || hits_last_.empty() || hits_last_ != hits_before_) {
    return slots;
  }
  int64_t bytes = 0;
  for (uint32_t pos : hits_last_) {
    if (!cache_.occupied(pos)) return {};
    const Response& r = cache_.peek(pos);
    if (r.type != OpType::kAllreduce || r.device != kCpuDevice || r.compression != Compression::kNone ||
        r.group_id != 0 || r.reduce_op == ReduceOp::kAdasum || r.tensor_sizes.size() != 1) {
      return {};
    }
    bytes += r.tensor_sizes[0] * static_cast<int64_t>(dtype_size(r.dtype));
    if (bytes > config_.eager_allreduce_bytes) return {};
    slots.push_back(CycleVote::Slot{r.tensor_sizes[0], r.dtype, r.reduce_op});
  }
  eager_ = hits_last_;
  return slots;
}

void Controller::write_eager(const Request& q, uint32_t pos) {
  const auto it = std::lower_bound(eager_.begin(), eager_.end(), pos);
  if (it == eager_.end() || *it != pos) return;
  const void* input = local_.host_input(q.name);
  if (input == nullptr) {  // (cannot happen for a pending host op) no data: not a result anywhere
    votes_.record_invalid(pos);
    return;
  }
  const size_t slot = static_cast<size_t>(it - eager_.begin());
  // Same parameters as the cached response (a hit): its count, dtype and prescale.
  const Response& r = cache_.peek(pos);
  kernels::scale_copy(votes_.slot_data(slot), input, r.tensor_sizes[0], r.dtype, r.prescale);
}

void Controller::vote(const Input& input, Clock::time_point now) {
  votes_.reset();
  std::vector<CycleVote::Slot> slots = plan_eager();
  // The autotuner's words ride as one more slot, reduced by min.
  if (!input.tuning.empty()) {
    slots.push_back(CycleVote::Slot{static_cast<int64_t>(input.tuning.size()), DataType::kInt64, ReduceOp::kMin});
  }
  if (!slots.empty()) votes_.set_slots(slots);
  if (!input.tuning.empty()) {
    std::memcpy(votes_.slot_data(slots.size() - 1), input.tuning.data(), input.tuning.size() * sizeof(int64_t));
  }
  std::vector<Waiting> still, grouped;
  for (Waiting& w : pending_cached_) {
    if (w.request.group_id != 0) {
      grouped.push_back(std::move(w));
      continue;
    }
    uint32_t pos = 0;
    switch (cache_.lookup(w.request, &pos)) {
      case ResponseCache::Lookup::kMiss:
        uncached_.push_back(std::move(w.request));
        break;
      case ResponseCache::Lookup::kHit:
        if (stall_.should_uncache(w.since, now)) {
          // Waited long for the other ranks: send it through the coordinator,
          // where the stall inspector can see which ranks are missing.
          HVL_LOG(kDebug, "'" << w.request.name << "' waited for a cache hit; renegotiating it");
          votes_.record_invalid(pos);
        } else {
          votes_.record_hit(pos);
          if (!eager_.empty()) write_eager(w.request, pos);
        }
        still.push_back(std::move(w));
        break;
      case ResponseCache::Lookup::kInvalid:
        votes_.record_invalid(pos);
        still.push_back(std::move(w));
        break;
    }
  }
  pending_cached_.swap(still);
  vote_groups(&grouped, now);
  // A grouped name going to full negotiation must go there on every rank: its
  // cached position (if any) becomes invalid everywhere.
  for (const Request& q : uncached_) {
    uint32_t pos = 0;
    if (q.group_id != 0 && cache_.lookup(q, &pos) != ResponseCache::Lookup::kMiss) votes_.record_invalid(pos);
  }
  if (input.shutdown || stall_shutdown_) votes_.record_shutdown(comm_.rank);
  if (input.exiting) votes_.record_exiting(comm_.rank);
  if (!uncached_.empty() || !stall_failures_.empty()) votes_.set(CycleVote::kUncachedInQueue);
  if (joined_) votes_.set(CycleVote::kJoined);
}

void Controller::vote_groups(std::vector<Waiting>* grouped, Clock::time_point now) {
  // Each group here arrived whole (accept()); its members are in arrival order.
  std::unordered_map<uint64_t, std::vector<Waiting*>> groups;
  std::vector<uint64_t> order;
  for (Waiting& w : *grouped) {
    auto& members = groups[w.request.group_id];
    if (members.empty()) order.push_back(w.request.group_id);
    members.push_back(&w);
  }
  for (uint64_t id : order) {
    std::vector<Waiting*>& members = groups[id];
    std::vector<uint32_t> positions;
    bool all_hit = true;
    for (Waiting* w : members) {
      uint32_t pos = 0;
      if (cache_.lookup(w->request, &pos) != ResponseCache::Lookup::kHit || stall_.should_uncache(w->since, now)) {
        all_hit = false;
        break;
      }
      positions.push_back(pos);
    }
    if (all_hit) {
      for (uint32_t pos : positions) votes_.record_hit(pos);
      for (Waiting* w : members) pending_cached_.push_back(std::move(*w));
    } else {
      // vote() marks the members' cached positions invalid.
      for (Waiting* w : members) uncached_.push_back(std::move(w->request));
    }
  }
}

std::vector<Response> Controller::take_cache_hits() {
  std::vector<Response> hits;
  hits_before_.swap(hits_last_);
  hits_last_.clear();
  if (votes_.test(CycleVote::kJoined)) {
    // A joined rank cannot set hit bits: send everything through the coordinator.
    for (Waiting& w : pending_cached_) uncached_.push_back(std::move(w.request));
    pending_cached_.clear();
    return hits;
  }
  if (cache_.capacity() == 0) return hits;
  for (uint32_t pos : votes_.invalid()) cache_.erase(pos);
  const std::vector<uint32_t> positions = votes_.hits();
  // A group's hits count only all together (a member's position may have been
  // invalidated by another rank this cycle: the group then renegotiates).
  std::unordered_map<uint64_t, int32_t> group_hits;
  for (uint32_t pos : positions) {
    const Response& r = cache_.peek(pos);
    if (r.group_id != 0) ++group_hits[r.group_id];
  }
  // The names as the cache holds them (its slots do not move in this function).
  std::unordered_set<std::string_view> hit_names;
  hits.reserve(positions.size());
  for (uint32_t pos : positions) {
    const Response& peeked = cache_.peek(pos);
    if (peeked.group_id != 0 && group_hits[peeked.group_id] < peeked.group_size) continue;
    const Response& r = cache_.get(pos);
    hit_names.insert(std::string_view(r.names[0]));
    hits.push_back(r);
    hits_last_.push_back(pos);  // (positions() is ascending)
    const auto eager = std::lower_bound(eager_.begin(), eager_.end(), pos);
    if (eager != eager_.end() && *eager == pos) {
      // Every rank hit it, so every rank wrote its data: the slot holds the result.
      hits.back().reduced = votes_.slot_result(static_cast<size_t>(eager - eager_.begin()));
      ++eager_allreduces_;
    }
  }
  if (!hit_names.empty()) {
    cache_hits_ += hit_names.size();
    pending_cached_.erase(std::remove_if(pending_cached_.begin(), pending_cached_.end(),
                                         [&](const Waiting& w) { return hit_names.count(w.request.name) > 0; }),
                          pending_cached_.end());
  }
  return hits;
}

void Controller::inspect_stalls(Clock::time_point now) {
  if (!stall_.due(now)) return;
  auto local_since = [this](const std::string& name) {
    Clock::time_point t;
    return local_.find(name, nullptr, &t) ? t : Clock::time_point::max();
  };
  StallInspector::Report report = stall_.check(readiness_->pending(), local_since, now, identity_.where);
  if (!report.warning.empty()) HVL_LOG(kWarning, report.warning);
  for (Response& r : report.failures) {
    HVL_LOG(kError, r.error_message);
    readiness_->drop(r.names[0]);
    stall_failures_.push_back(std::move(r));
    // This cycle carries the errors to every rank and then shuts down everywhere.
    stall_shutdown_ = true;
  }
}

void Controller::cache_negotiated(const std::vector<Response>& negotiated) {
  if (cache_.capacity() == 0) return;
  Request request;
  for (const Response& r : negotiated) {
    if (!ResponseCache::cacheable(r.type)) continue;
    const bool mine = local_.find(r.names[0], &request, nullptr);
    cache_.put(r, mine ? &request : nullptr);
  }
}

Status Controller::negotiate(std::vector<Response>* out) {
  const int rank = comm_.rank, size = comm_.size;
  send_buf_.clear();
  encode_requests(uncached_, &send_buf_);
  uncached_.clear();

  // Gather every rank's request list on rank 0: its length, then its bytes.
  transport::Context& wire = *wire_;
  constexpr int kLengthTag = transport_ops::kTagBase + 8, kBodyTag = transport_ops::kTagBase + 9;
  int64_t len = static_cast<int64_t>(send_buf_.size());
  std::vector<int64_t> lens(rank == 0 ? size : 0), displs(rank == 0 ? size : 0);
  std::vector<transport::RequestPtr> reqs;
  if (rank == 0) {
    lens[0] = len;
    reqs.resize(static_cast<size_t>(size));
    for (int r = 1; r < size; ++r) {
      HVL_RETURN_IF_ERROR(wire.irecv(&lens[r], sizeof(int64_t), r, kLengthTag, &reqs[r]));
    }
    HVL_RETURN_IF_ERROR(transport::wait_all(&reqs, transport::kNoTimeout, transport::kControlBackoff));
    int64_t total = 0;
    for (int r = 0; r < size; ++r) {
      displs[r] = total;
      total += lens[r];
    }
    recv_buf_.resize(static_cast<size_t>(total));
    if (len > 0) std::memcpy(recv_buf_.data(), send_buf_.data(), static_cast<size_t>(len));
    for (int r = 1; r < size; ++r) {
      HVL_RETURN_IF_ERROR(
          wire.irecv(recv_buf_.data() + displs[r], static_cast<size_t>(lens[r]), r, kBodyTag, &reqs[r]));
    }
  } else {
    reqs.resize(2);
    HVL_RETURN_IF_ERROR(wire.isend(&len, sizeof(int64_t), 0, kLengthTag, &reqs[0]));
    HVL_RETURN_IF_ERROR(wire.isend(send_buf_.data(), static_cast<size_t>(len), 0, kBodyTag, &reqs[1]));
  }
  HVL_RETURN_IF_ERROR(transport::wait_all(&reqs, transport::kNoTimeout, transport::kControlBackoff));

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
      if (r != 0 && timeline_.active()) {  // rank 0 marked its own requests when it accepted them
        const Clock::time_point t = Clock::now();
        for (const Request& q : requests) mark_ready(q, r, t);
      }
      readiness_->add(r, requests);
    }
    std::vector<Response> ready = readiness_->take_ready();
    if (!stall_failures_.empty()) {
      ready.insert(ready.end(), stall_failures_.begin(), stall_failures_.end());
      stall_failures_.clear();
    }
    send_buf_.clear();
    encode_responses(ready, &send_buf_);
    resp_len = static_cast<int64_t>(send_buf_.size());
  }
  HVL_RETURN_IF_ERROR(transport_ops::broadcast(wire, &resp_len, sizeof(resp_len), 0, transport::kControlBackoff));
  if (rank != 0) send_buf_.resize(static_cast<size_t>(resp_len));
  HVL_RETURN_IF_ERROR(
      transport_ops::broadcast(wire, send_buf_.data(), static_cast<size_t>(resp_len), 0, transport::kControlBackoff));
  return decode_responses(reinterpret_cast<const uint8_t*>(send_buf_.data()), send_buf_.size(), out);
}

Status Controller::share_stall_reason(std::string* reason) {
  watchdog_.enter("shutdown (sharing the stall reason)");
  struct Leave {
    Watchdog& w;
    ~Leave() { w.leave(); }
  } leave{watchdog_};
  // The lowest rank that knows a reason sends it (the vote's exchange: a min).
  uint64_t from = static_cast<uint64_t>(reason->empty() ? comm_.size : comm_.rank);
  HVL_RETURN_IF_ERROR(exchange_.run(&from, 1, [](const uint64_t* in, uint64_t* inout) {
    if (*in < *inout) *inout = *in;
  }));
  if (from == static_cast<uint64_t>(comm_.size)) return Status::OK();  // not a stall
  const int root = static_cast<int>(from);
  int64_t len = static_cast<int64_t>(reason->size());
  HVL_RETURN_IF_ERROR(transport_ops::broadcast(*wire_, &len, sizeof(len), root, transport::kControlBackoff));
  std::string shared = *reason;
  shared.resize(static_cast<size_t>(len));
  HVL_RETURN_IF_ERROR(
      transport_ops::broadcast(*wire_, shared.data(), static_cast<size_t>(len), root, transport::kControlBackoff));
  if (reason->empty()) *reason = std::move(shared);
  return Status::OK();
}

}  // namespace horovodlite::negotiation
