// The runtime: owns the background thread and its lifecycle and the process
// sets, each with its queue of new requests, its table of ops in flight, its
// controller (negotiation over the set's communicator) and its executor; the
// global set (id 0) is one of them. The single global handle to it lives in api.cc.
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
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "autotune/autotuner.h"
#include "entry.h"
#include "execution_observer.h"
#include "executor.h"
#include "horovodlite/config.h"
#include "horovodlite/horovodlite.h"
#include "mpi_context.h"
#include "negotiation/controller.h"
#include "process_set_state.h"
#include "timeline.h"
#include "watchdog.h"

namespace horovodlite {

class Runtime {
 public:
  static Status start(const InitOptions& options, std::shared_ptr<Runtime>* out);
  ~Runtime();

  // Takes ownership of the entry and returns its handle (already completed with an
  // error if the name is in flight on the set, the set is unknown or this rank is
  // not a member, or the runtime has stopped). The request's rank becomes this
  // rank's rank in the set.
  HandlePtr enqueue(std::unique_ptr<TensorEntry> entry, int32_t set_id);
  // The members of a grouped op, enqueued atomically on one set (the background
  // thread drains them in one cycle). All fail if one cannot be enqueued.
  std::vector<HandlePtr> enqueue_group(std::vector<std::unique_ptr<TensorEntry>> entries, int32_t set_id);

  // The set's ranks and this rank's rank in it (-1: not a member); false if no
  // set has this id.
  bool set_info(int32_t set_id, std::vector<int>* ranks, int* rank);
  std::vector<int32_t> set_ids();
  // The next serial number for unnamed ops (or barriers) on the set: per set, so
  // that names agree across its members whatever other sets they use.
  uint64_t next_serial(int32_t set_id, bool barrier);

  // Collective over every rank of the global set: at init (before the background
  // thread) or on the background thread as the action of the global response of
  // add_process_set()/remove_process_set() (every rank at the same point).
  Status register_set(std::vector<int> ranks, int32_t* id);
  Status unregister_set(int32_t id);
  // Asks every rank to stop (through the next cycle) and joins the thread.
  // exiting: the process is exiting without shutdown(); the other ranks' ops
  // fail with a message naming this rank.
  Status stop(bool exiting = false);
  // Asks every rank to stop (through the next cycle) without waiting.
  void request_stop();
  // Whether the runtime has stopped (shut down here or by a peer, or failed).
  bool stopped() {
    std::lock_guard<std::mutex> lock(mu_);
    return stopped_;
  }
  // Whether the caller is the background thread (which cannot join itself).
  bool on_background_thread() const { return std::this_thread::get_id() == thread_.get_id(); }

  // Rank 0 writes the timeline; on other ranks these succeed and do nothing.
  Status start_timeline(const std::string& path, bool mark_cycles);
  Status stop_timeline();

  const MpiContext& mpi() const { return mpi_; }
  const Config& config() const { return config_; }
  Stats stats() const;

 private:
  Runtime() = default;
  void loop();
  // One negotiation cycle; false once the runtime has shut down.
  bool cycle();
  // One set's negotiation and its responses; false if the runtime must stop.
  bool cycle_set(ProcessSetState& set, bool global);
  void run(ProcessSetState& set, const Response& response, std::chrono::steady_clock::time_point ready);
  void abort_all(const Status& status);
  // The controller of a member's set, built on the set's communicator.
  std::unique_ptr<negotiation::Controller> make_controller(ProcessSetState& set);
  // The controller's view of this rank's ops in flight (see negotiation::Controller::LocalLookup).
  // Under mu_: why `name` cannot be enqueued on the set (stopped, unknown set, not a
  // member, being removed, in flight), or OK and *out = the set.
  Status check_enqueue_locked(int32_t set_id, const std::string& name, ProcessSetState** out);
  bool find_local(ProcessSetState& set, const std::string& name, Request* request,
                  std::chrono::steady_clock::time_point* enqueued);
  // Drains and destroys a set's executor, controller and communicators.
  static void destroy(std::unique_ptr<ProcessSetState> set);
  // The message ops in flight complete with when the job shuts down.
  std::string shutdown_message(const std::vector<int>& requesters, const std::vector<int>& exiting) const;
  // At a global shutdown (collective over every rank): the stall reason that
  // members of a process set learned from its stall error goes to every rank, so
  // that ranks outside the set fail their ops with it too.
  Status share_stall_reason();
  // The watchdog fired: a peer died or hung. Fails every op and aborts the job.
  void on_peer_timeout(const std::string& step, double waited_s);

  // Times the executor's phases for the timeline.
  class TimelineObserver : public ExecutionObserver {
   public:
    explicit TimelineObserver(Timeline& timeline) : timeline_(timeline) {}
    void phase_start(const Response& response, const char* phase) override;
    void phase_end(const Response& response, const char* phase) override;
    bool saw_phase = false;
    std::string prefix;  // the set's timeline prefix (ProcessSetState::timeline_prefix)

   private:
    Timeline& timeline_;
    std::chrono::steady_clock::time_point start_;
  };

  Config config_;
  MpiContext mpi_;

  std::mutex mu_;
  std::condition_variable cv_;
  // Every registered set by id (0: global). Changed only at init and on the
  // background thread; read under mu_ elsewhere.
  std::map<int32_t, std::unique_ptr<ProcessSetState>> sets_;
  ProcessSetState* global_ = nullptr;
  int32_t next_set_id_ = 1;  // the same on every rank (sets change in the same order)
  bool shutdown_requested_ = false;
  bool exiting_ = false;
  bool stopped_ = false;
  Status stop_reason_;

  Timeline timeline_;  // internally synchronised (start/stop from any thread)
  TimelineObserver observer_{timeline_};
  std::unique_ptr<Watchdog> watchdog_;
  // HOROVODLITE_AUTOTUNE: tunes config_'s fusion threshold, cycle time and eager
  // size between cycles (background thread; the same values at the same cycle on
  // every rank: autotune/autotuner.h). Null when off.
  std::unique_ptr<autotune::Autotuner> tuner_;
  // The tuner's parameters go out with this cycle's vote; applied after it.
  void apply_tuning(const autotune::Params& p);

  std::string stall_reason_;  // background thread: why a stall shutdown happens (every rank)
  // Background thread: the last cycle took new requests or ran responses (see loop()).
  bool progressed_ = false;

  struct Counters {
    std::atomic<uint64_t> cycles{0}, responses_executed{0}, fused_tensors{0}, errors{0};
  } counters_;
  std::thread thread_;
};

}  // namespace horovodlite
