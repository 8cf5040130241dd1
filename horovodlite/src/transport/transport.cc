#include "transport/transport.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>

namespace horovodlite {
namespace transport {

namespace {

std::atomic<bool> g_interrupted{false};
std::mutex g_interrupt_mu;
std::string* g_interrupt_reason = nullptr;  // guarded by g_interrupt_mu; leaked at exit (no destructor order)

Status interrupted() {
  std::lock_guard<std::mutex> lock(g_interrupt_mu);
  return Status::Aborted("transport: wait interrupted: " + (g_interrupt_reason ? *g_interrupt_reason : std::string()));
}

template <typename Test>
Status poll_until(Test test, std::chrono::milliseconds timeout, const Backoff& backoff, bool* done) {
  const auto start = std::chrono::steady_clock::now();
  int sleep_us = 2;
  int attempts = 0;
  while (true) {
    HVL_RETURN_IF_ERROR(test(done));
    if (*done) return Status::OK();
    ++attempts;
    const auto waited = std::chrono::steady_clock::now() - start;
    if (timeout != kNoTimeout && waited >= timeout) return Status::OK();
    if (attempts < backoff.spin_tests || waited < backoff.spin) continue;
    if (attempts < backoff.spin_tests + backoff.yield_tests) {
      std::this_thread::yield();
      continue;
    }
    if (g_interrupted.load(std::memory_order_relaxed)) return interrupted();
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    sleep_us = std::min(sleep_us * 2, backoff.max_sleep_us);
  }
}

std::string describe(const Request& r) {
  return std::string(r.is_send() ? "send to" : "receive from") + " rank " + std::to_string(r.peer()) + " (tag " +
         std::to_string(r.tag()) + ")";
}

}  // namespace

void interrupt_waits(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(g_interrupt_mu);
    if (g_interrupt_reason == nullptr) g_interrupt_reason = new std::string();
    *g_interrupt_reason = why;
  }
  g_interrupted = true;
}

void clear_interrupt() { g_interrupted = false; }

Status Request::wait(std::chrono::milliseconds timeout, const Backoff& backoff) {
  bool done = false;
  HVL_RETURN_IF_ERROR(poll_until([this](bool* d) { return test(d); }, timeout, tune(backoff), &done));
  if (done) return Status::OK();
  return Status::Timeout("transport: " + describe(*this) + " did not complete within " +
                         std::to_string(timeout.count()) + " ms");
}

Backoff yielding(const Backoff& backoff) {
  Backoff out = backoff;
  out.spin = std::chrono::microseconds(0);
  out.spin_tests = std::min(backoff.spin_tests, 8);
  out.yield_tests = std::max(backoff.yield_tests, 2000);
  return out;
}

Status size_mismatch(size_t sent, size_t received) {
  return Status::InvalidArgument("transport: a send of " + std::to_string(sent) + " bytes met a receive of " +
                                 std::to_string(received) + " bytes");
}

Status wait_all(std::vector<RequestPtr>* requests, std::chrono::milliseconds timeout, const Backoff& backoff) {
  // (No deadline for kNoTimeout: now + milliseconds::max() overflows.)
  const auto deadline =
      timeout == kNoTimeout ? std::chrono::steady_clock::time_point::max() : std::chrono::steady_clock::now() + timeout;
  for (RequestPtr& r : *requests) {
    if (!r) continue;
    std::chrono::milliseconds left = kNoTimeout;
    if (timeout != kNoTimeout) {
      left =
          std::max(std::chrono::milliseconds(0),
                   std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()));
    }
    HVL_RETURN_IF_ERROR(r->wait(left, backoff));
  }
  return Status::OK();
}

Status wait_any(Request* const* requests, int n, int* which, std::chrono::milliseconds timeout) {
  *which = -1;
  bool any = false;
  for (int i = 0; i < n; ++i) any = any || requests[i] != nullptr;
  if (!any) return Status::InvalidArgument("transport: wait_any over no request");
  bool done = false;
  HVL_RETURN_IF_ERROR(poll_until(
      [&](bool* d) -> Status {
        for (int i = 0; i < n; ++i) {
          if (requests[i] == nullptr) continue;
          HVL_RETURN_IF_ERROR(requests[i]->test(d));
          if (*d) {
            *which = i;
            return Status::OK();
          }
        }
        return Status::OK();
      },
      timeout, requests[0] ? requests[0]->tune(kStreamBackoff) : kStreamBackoff, &done));
  if (done) return Status::OK();
  std::string what;
  for (int i = 0; i < n; ++i) {
    if (requests[i] == nullptr) continue;
    what += (what.empty() ? "" : " or ") + describe(*requests[i]);
  }
  return Status::Timeout("transport: none of " + what + " completed within " + std::to_string(timeout.count()) + " ms");
}

// ---- Topology ----

int Topology::local_rank(int rank) const {
  int n = 0;
  for (int r = 0; r < rank; ++r) n += host[static_cast<size_t>(r)] == host[static_cast<size_t>(rank)];
  return n;
}

int Topology::local_size(int rank) const {
  return static_cast<int>(std::count(host.begin(), host.end(), host[static_cast<size_t>(rank)]));
}

std::vector<int> Topology::local_ranks(int rank) const {
  std::vector<int> out;
  for (size_t r = 0; r < host.size(); ++r) {
    if (host[r] == host[static_cast<size_t>(rank)]) out.push_back(static_cast<int>(r));
  }
  return out;
}

std::vector<int> Topology::cross_ranks(int rank) const {
  const int lr = local_rank(rank);
  std::vector<int> out;
  for (size_t r = 0; r < host.size(); ++r) {
    if (local_rank(static_cast<int>(r)) == lr) out.push_back(static_cast<int>(r));
  }
  return out;
}

int Topology::cross_rank(int rank) const {
  const std::vector<int> c = cross_ranks(rank);
  return static_cast<int>(std::find(c.begin(), c.end(), rank) - c.begin());
}

int Topology::cross_size(int rank) const { return static_cast<int>(cross_ranks(rank).size()); }

std::vector<int> Topology::host_order() const {
  // Hosts are numbered in order of their lowest rank, so sorting by (host, rank) is host order.
  std::vector<int> out(host.size());
  for (size_t r = 0; r < host.size(); ++r) out[r] = static_cast<int>(r);
  std::stable_sort(out.begin(), out.end(),
                   [this](int a, int b) { return host[static_cast<size_t>(a)] < host[static_cast<size_t>(b)]; });
  return out;
}

Topology Topology::from_names(const std::vector<std::string>& names) {
  Topology t;
  std::map<std::string, int> ids;
  for (const std::string& n : names) {
    auto it = ids.find(n);
    if (it == ids.end()) it = ids.emplace(n, static_cast<int>(ids.size())).first;
    t.host.push_back(it->second);
  }
  return t;
}

Topology sub_topology(const Topology& parent, const std::vector<int>& ranks) {
  std::vector<std::string> names;
  names.reserve(ranks.size());
  for (int r : ranks) names.push_back(std::to_string(parent.host[static_cast<size_t>(r)]));
  return Topology::from_names(names);
}

// ---- Context ----

Context::Context(int rank, int size, Topology topology, std::vector<int> world_ranks)
    : rank_(rank), size_(size), topology_(std::move(topology)), world_ranks_(std::move(world_ranks)) {
  if (topology_.host.size() != static_cast<size_t>(size_)) topology_ = Topology::single_host(size_);
  if (world_ranks_.size() != static_cast<size_t>(size_)) {
    world_ranks_.resize(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) world_ranks_[static_cast<size_t>(r)] = r;
  }
}

Status Context::send_blocking(const void* buf, size_t bytes, int peer, int tag, std::chrono::milliseconds timeout) {
  RequestPtr r;
  HVL_RETURN_IF_ERROR(isend(buf, bytes, peer, tag, &r));
  return r->wait(timeout);
}

Status Context::recv_blocking(void* buf, size_t bytes, int peer, int tag, std::chrono::milliseconds timeout) {
  RequestPtr r;
  HVL_RETURN_IF_ERROR(irecv(buf, bytes, peer, tag, &r));
  return r->wait(timeout);
}

// A dissemination barrier (log2(p) rounds of one byte to rank + 2^k and from rank - 2^k).
Status Context::barrier(std::chrono::milliseconds timeout) {
  constexpr int kBarrierTag = kMaxTag;
  for (int step = 1; step < size_; step *= 2) {
    uint8_t out = 0, in = 0;
    RequestPtr s, r;
    HVL_RETURN_IF_ERROR(irecv(&in, 1, (rank_ - step + size_) % size_, kBarrierTag, &r));
    HVL_RETURN_IF_ERROR(isend(&out, 1, (rank_ + step) % size_, kBarrierTag, &s));
    HVL_RETURN_IF_ERROR(r->wait(timeout));
    HVL_RETURN_IF_ERROR(s->wait(timeout));
  }
  return Status::OK();
}

Status Context::dup(const std::string& name, std::shared_ptr<Context>* out) {
  std::vector<int> all(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) all[static_cast<size_t>(r)] = r;
  return split(all, name, out);
}

}  // namespace transport
}  // namespace horovodlite
