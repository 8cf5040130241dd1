// The runtime: the background thread and its lifecycle (start, stop, a peer
// exiting, the watchdog firing), the enqueue of new ops, and each cycle: every
// set's negotiation (its Controller), then "execute, then complete" for each
// agreed response. The process sets, with their queues and tables of ops in
// flight, are its ProcessSetTable (process_set_table.h); the timeline watches the
// executions (timeline_observer.h). The single global handle to it lives in api.cc.
//
// Why process sets cannot deadlock: every cycle, every rank runs the global
// set's negotiation first (all ranks take part), then the cycle of each set it is
// a member of, in ascending id, and runs each set's responses right after that
// set's negotiation. Each of these steps is a collective over exactly the set's
// members, and waits for nothing but them (no step waits on a user thread or on
// another set). Order the steps of the whole job by (cycle, set id): every rank
// takes part in its steps in that order, and the sets (added and removed only by
// responses of the global set, which every rank runs at the same point) are the
// same on every rank in every cycle. Take the earliest step not yet complete:
// each of its members has completed every earlier step it takes part in, so each
// reaches it, and it completes. So every step completes: an op on set A never
// waits while a rank of A is blocked in set B, because that rank finishes B's
// step (whose members are likewise not blocked) and then comes to A's.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "autotune/autotuner.h"
#include "entry.h"
#include "horovodlite/config.h"
#include "horovodlite/horovodlite.h"
#include "process_set_table.h"
#include "timeline.h"
#include "timeline_observer.h"
#include "watchdog.h"
#include "world.h"

namespace horovodlite {

class Runtime {
 public:
  static Status start(const InitOptions& options, std::shared_ptr<Runtime>* out);
  ~Runtime();

  // Takes ownership of the entry and returns its handle (see ProcessSetTable::enqueue).
  HandlePtr enqueue(std::unique_ptr<TensorEntry> entry, int32_t set_id) {
    return sets_->enqueue(std::move(entry), set_id);
  }
  // The members of a grouped op, enqueued atomically on one set (the background
  // thread drains them in one cycle). All fail if one cannot be enqueued.
  std::vector<HandlePtr> enqueue_group(std::vector<std::unique_ptr<TensorEntry>> entries, int32_t set_id) {
    return sets_->enqueue_group(std::move(entries), set_id);
  }
  // The process sets: registration, look-ups (thread-safe).
  ProcessSetTable& process_sets() { return *sets_; }

  // Asks every rank to stop (through the next cycle) and joins the thread.
  // exiting: the process is exiting without shutdown(); the other ranks' ops
  // fail with a message naming this rank.
  Status stop(bool exiting = false);
  // Asks every rank to stop (through the next cycle) without waiting.
  void request_stop();
  // Whether the runtime has stopped (shut down here or by a peer, or failed).
  bool stopped() { return sets_->closed(); }
  // Whether the caller is the background thread (which cannot join itself).
  bool on_background_thread() const { return std::this_thread::get_id() == thread_.get_id(); }

  // Rank 0 writes the timeline; on other ranks these succeed and do nothing.
  Status start_timeline(const std::string& path, bool mark_cycles);
  Status stop_timeline();

  const World& world() const { return world_; }
  const Config& config() const { return config_; }
  Stats stats() const;

 private:
  using Clock = std::chrono::steady_clock;
  Runtime() = default;
  // The phases of start(), in their order. join_world: the world over MPI or
  // the transport (HOROVOD_CONTROLLER). start_autotuner: the tuner and its
  // starting point (HOROVODLITE_AUTOTUNE). agree_on_thread_cpu: the background
  // thread's CPU (HOROVODLITE_THREAD_AFFINITY), the same verdict on every rank.
  // fail_start: stops what started and returns the failure.
  Status join_world(const InitOptions& options);
  void start_autotuner();
  Status agree_on_thread_cpu(int* cpu);
  void start_thread(int cpu);
  Status fail_start(const Status& failure);
  // start(), once the configuration is read: every rank agrees on the settings
  // that size the negotiation, and on whether the timeline opened.
  Status agree_on_settings();
  void loop();
  // One negotiation cycle; false once the runtime has shut down.
  bool cycle();
  // One set's negotiation and its responses; false if the runtime must stop.
  bool cycle_set(ProcessSetState& set, bool global);
  // Execute, then complete: one agreed response.
  void run(ProcessSetState& set, const Response& response, Clock::time_point ready);
  // The execution of one response: the process-set change of a global barrier,
  // or the executor (timed for the timeline, under the watchdog).
  OpResult execute(ProcessSetState& set, const Response& response, const std::vector<TensorEntry*>& entries,
                   Clock::time_point ready);
  // Counters, logs and the stall reason an error response carries.
  void account(const Response& response, const OpResult& result);
  // Hands the op's results (outputs, received splits, the last joined rank) to
  // the entries' handles, removes the entries from the set's table and
  // completes the handles (now, or once the device work has finished).
  void complete(ProcessSetState& set, const Response& response, const std::vector<TensorEntry*>& entries,
                OpResult result);
  void abort_all(const Status& status);
  // The message ops in flight complete with when the job shuts down.
  std::string shutdown_message(const std::vector<int>& requesters, const std::vector<int>& exiting) const;
  // The watchdog fired: a peer died or hung. Fails every op and aborts the job.
  void on_peer_timeout(const std::string& step, double waited_s);

  Config config_;
  World world_;
  Timeline timeline_;  // internally synchronised (start/stop from any thread)
  TimelineObserver observer_{timeline_};
  std::unique_ptr<Watchdog> watchdog_;
  // HOROVODLITE_AUTOTUNE: tunes config_'s fusion threshold, cycle time and eager
  // size between cycles (background thread; the same values at the same cycle on
  // every rank: autotune/autotuner.h). Null when off.
  std::unique_ptr<autotune::Autotuner> tuner_;
  // The tuner's parameters go out with this cycle's vote; applied after it.
  void apply_tuning(const autotune::Params& p);
  std::unique_ptr<ProcessSetTable> sets_;

  // Set by any thread; the background thread reads them each cycle.
  std::atomic<bool> shutdown_requested_{false};
  std::atomic<bool> exiting_{false};

  std::string stall_reason_;  // background thread: why a stall shutdown happens (every rank)
  // Background thread: the last cycle took new requests or ran responses (see loop()).
  bool progressed_ = false;

  struct Counters {
    std::atomic<uint64_t> cycles{0}, responses_executed{0}, fused_tensors{0}, errors{0};
  } counters_;
  std::thread thread_;
};

// The runtime init() started; null before init() and after shutdown(). The one
// global handle to it is in api.cc.
std::shared_ptr<Runtime> current_runtime();

}  // namespace horovodlite
