#include "watchdog.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "world.h"

namespace horovodlite {

namespace {

std::atomic<int> g_waiting_for{-1};  // world rank, or -1

}  // namespace

WaitingFor::WaitingFor(int world_rank) { g_waiting_for.store(world_rank, std::memory_order_relaxed); }
WaitingFor::~WaitingFor() { g_waiting_for.store(-1, std::memory_order_relaxed); }

Status Watchdog::learn_peers(const World& world) {
  struct Entry {
    int world_rank;
    char host[124];
  } mine{};
  mine.world_rank = world.wire()->world_rank(world.rank());
  // A Gloo launcher names each worker's host (HOROVOD_HOSTNAME: -H's names).
  const char* named = world.launcher_names_hosts() ? std::getenv("HOROVOD_HOSTNAME") : nullptr;
  if (named != nullptr && *named != '\0') {
    std::strncpy(mine.host, named, sizeof(mine.host) - 1);
  } else if (gethostname(mine.host, sizeof(mine.host) - 1) != 0) {
    std::strcpy(mine.host, "?");
  }
  std::vector<Entry> all(static_cast<size_t>(world.size()));
  HVL_RETURN_IF_ERROR(world.allgather(&mine, sizeof(Entry), all.data()));
  peers_.clear();
  for (const Entry& e : all) peers_.push_back({e.world_rank, std::string(e.host, strnlen(e.host, sizeof(e.host)))});
  return Status::OK();
}

std::string Watchdog::waiting_for() const {
  const int world = g_waiting_for.load(std::memory_order_relaxed);
  if (world < 0) return "";
  for (size_t r = 0; r < peers_.size(); ++r) {
    if (peers_[r].world_rank == world) return " waiting for rank " + std::to_string(r) + " on host " + peers_[r].host;
  }
  return " waiting for world rank " + std::to_string(world);
}

Watchdog::Watchdog(double timeout_s, OnExpire on_expire)
    : timeout_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s))),
      on_expire_(std::move(on_expire)) {
  if (timeout_s > 0) thread_ = std::thread([this] { monitor(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::enter(std::string_view step) {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    step_.assign(step.data(), step.size());  // reuses capacity: no allocation per cycle
  }
  since_.store(Clock::now().time_since_epoch().count(), std::memory_order_release);
}

void Watchdog::leave() { since_.store(0, std::memory_order_release); }

void Watchdog::monitor() {
  // Checking every quarter of the timeout (at most every second) bounds the
  // detection time by timeout + min(timeout / 4, 1 s).
  const Clock::duration interval =
      std::clamp<Clock::duration>(timeout_ / 4, std::chrono::milliseconds(10), std::chrono::seconds(1));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, interval, [this] { return stop_; });
    if (stop_) return;
    const int64_t since = since_.load(std::memory_order_acquire);
    if (since == 0) continue;
    const Clock::duration waited = Clock::now() - Clock::time_point(Clock::duration(since));
    if (waited < timeout_) continue;
    const std::string step = step_ + waiting_for();
    lock.unlock();
    on_expire_(step, std::chrono::duration<double>(waited).count());
    return;  // fires once
  }
}

}  // namespace horovodlite
