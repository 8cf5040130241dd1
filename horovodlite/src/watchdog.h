// The watchdog on the background thread. Before each step that waits on other
// ranks (a negotiation round, a collective) the background thread calls enter();
// after it, leave(). A monitor thread (a condition-variable wait, no spinning)
// calls on_expire once if one step has lasted longer than the timeout: a peer
// has died or hung, and MPI alone would wait for ever.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace horovodlite {

class Watchdog {
 public:
  using OnExpire = std::function<void(const std::string& step, double waited_s)>;

  // timeout_s <= 0: disabled (no thread).
  Watchdog(double timeout_s, OnExpire on_expire);
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  ~Watchdog();

  void enter(std::string_view step);
  void leave();

 private:
  void monitor();

  using Clock = std::chrono::steady_clock;
  const Clock::duration timeout_;
  OnExpire on_expire_;
  std::atomic<int64_t> since_{0};  // Clock ticks; 0 while not in a step
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::string step_;
  std::thread thread_;
};

}  // namespace horovodlite
