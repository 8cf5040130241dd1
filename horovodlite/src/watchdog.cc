#include "watchdog.h"

#include <algorithm>

namespace horovodlite {

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
    const std::string step = step_;
    lock.unlock();
    on_expire_(step, std::chrono::duration<double>(waited).count());
    return;  // fires once
  }
}

}  // namespace horovodlite
