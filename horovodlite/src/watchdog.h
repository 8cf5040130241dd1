// The watchdog on the background thread. Before each step that waits on other
// ranks (a negotiation round, a collective) the background thread calls enter();
// after it, leave(). A monitor thread (a condition-variable wait, no spinning)
// calls on_expire once if one step has lasted longer than the timeout: a peer
// has died or hung, and MPI alone would wait for ever.
//
// Point-to-point algorithms (the ring) say which peer they are blocked on
// (WaitingFor); the step then names that rank and its host ("... waiting for
// rank 2 on host node7"), which learn_peers() gathered at start. An MPI
// collective does not say which rank it waits for: its step names none.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "horovodlite/common.h"
#include "world.h"

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

  // Collective over `world` (horovodlite's ranks): every rank's world rank
  // (the transport's: MPI_COMM_WORLD's under MPI) and host name, for naming the
  // peer a step waited for.
  Status learn_peers(const World& world);
  // " waiting for rank R on host H" for the peer WaitingFor names now; "" for none.
  std::string waiting_for() const;

 private:
  void monitor();
  struct Peer {
    int world_rank;
    std::string host;
  };
  std::vector<Peer> peers_;  // by rank in learn_peers' communicator; set before the thread waits on anything

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

// While one lives, the background thread is blocked on the world rank
// `world_rank` (transport::Context::world_rank; -1: none known). Not nested; one background thread.
class WaitingFor {
 public:
  explicit WaitingFor(int world_rank);
  ~WaitingFor();
  WaitingFor(const WaitingFor&) = delete;
  WaitingFor& operator=(const WaitingFor&) = delete;
};

}  // namespace horovodlite
