// The timeline: a Chrome-trace JSON file (chrome://tracing, Perfetto) that rank 0
// writes while the job runs. Each tensor name is a "process" in the trace; its
// rows show NEGOTIATE_<OP> (with an instant mark per rank as it becomes ready),
// then <OP> containing QUEUE and the execution phases (the collective named by
// its algorithm, e.g. MPI_ALLREDUCE, and the fusion-buffer copies when the
// executor reports them).
//
// The background thread only formats an event and appends it to a queue; a writer
// thread writes whole lines with one write() per batch, so a killed job leaves a
// file that ends at an event boundary ("[\n{...},\n{...},\n"), which both viewers
// accept. stop() appends a last event and the closing bracket: valid JSON.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "horovodlite/common.h"

namespace horovodlite {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  Timeline() = default;
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;
  ~Timeline();

  // Opens (truncates) `path` and starts the writer thread. Starting again with the
  // same path is a no-op; with another path while active it is an error.
  Status start(const std::string& path, bool mark_cycles);
  // Writes the closing bracket and closes the file. No-op when inactive.
  Status stop();

  bool active() const { return active_.load(std::memory_order_acquire); }
  bool mark_cycles() const { return mark_cycles_.load(std::memory_order_relaxed); }

  // ---- events (any thread; no-ops when inactive) ----
  // The first call for a name opens its NEGOTIATE_<op> phase; later calls are ignored.
  void negotiate_start(const std::string& name, const char* op, Clock::time_point t);
  // An instant mark: `rank` has submitted `name`.
  void rank_ready(const std::string& name, int rank, Clock::time_point t);
  // Closes the NEGOTIATE phase (if one was opened while active).
  void negotiate_end(const std::string& name, Clock::time_point t);
  // A complete phase [start, end] on the tensor's row (QUEUE, MPI_ALLREDUCE, ...).
  void phase(const std::string& name, const std::string& phase, Clock::time_point start, Clock::time_point end);
  // An instant event on the tensor's row with a message (errors).
  void instant(const std::string& name, const std::string& what, const std::string& message, Clock::time_point t);
  // An instant CYCLE_START mark on the "horovodlite" row.
  void cycle_start(Clock::time_point t);

  // "allreduce" -> "ALLREDUCE": how op names appear in phase names.
  static std::string upper(const char* s);

  // JSON string escaping (exposed for tests).
  static std::string escape(const std::string& s);

 private:
  // Caller holds mu_.
  int pid_for(const std::string& name);
  int64_t micros(Clock::time_point t) const;
  void push(std::string line);
  void writer_loop();

  std::atomic<bool> active_{false};
  std::atomic<bool> mark_cycles_{false};

  std::mutex mu_;  // everything below
  std::condition_variable cv_;
  std::string path_;
  int fd_ = -1;
  Clock::time_point origin_;
  std::vector<std::string> queue_;
  bool stopping_ = false;
  std::unordered_map<std::string, int> pids_;
  struct Negotiation {
    Clock::time_point start;
    std::string op;
  };
  std::unordered_map<std::string, Negotiation> negotiating_;
  std::thread writer_;
  Status write_error_;
};

}  // namespace horovodlite
