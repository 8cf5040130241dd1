// The process sets of this job and the ops in flight on each: what the runtime's
// enqueue (any thread), its background thread and each set's controller share.
// One mutex guards every set's queue of new requests and table of ops in flight;
// the table's methods take it and nothing else does, so no caller holds it while
// it calls out (the controllers read this rank's ops through ProcessSetState's
// LocalOps, which takes this lock and only this one).
//
// A set (ProcessSetState) holds its members and, on a member, its communicator
// (MpiContext), its Executor (algorithms, fusion buffer) and its Controller
// (negotiation). The global set (id 0) is one of them, on the runtime's own
// MpiContext. Sets are added and removed only at init and on the background
// thread (collectively over every rank: register_set, unregister_set); other
// threads only look them up.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "entry.h"
#include "executor.h"
#include "horovodlite/config.h"
#include "horovodlite/horovodlite.h"
#include "message.h"
#include "negotiation/controller.h"
#include "timeline.h"
#include "watchdog.h"
#include "world.h"

namespace horovodlite {

class ProcessSetTable;

struct ProcessSetState {
  int32_t id = 0;
  std::vector<int> ranks;  // global ranks, ascending
  int rank = -1;           // this process's rank in the set; -1: not a member

  // Members only (null elsewhere). Background thread (built before it runs).
  std::unique_ptr<World> own_world;  // process sets; the global set uses the runtime's
  World* world = nullptr;
  std::unique_ptr<Executor> executor;
  std::unique_ptr<negotiation::LocalOps> local_ops;  // the controller's view of `table`
  std::unique_ptr<negotiation::Controller> controller;

  // Guarded by the ProcessSetTable's mutex.
  std::vector<Request> queue;
  std::unordered_map<std::string, std::unique_ptr<TensorEntry>> table;
  bool removing = false;  // a removal is being agreed: no new ops
  uint64_t barriers = 0;  // barrier names ("horovodlite.barrier.<n>") count per set
  uint64_t nonames = 0;   // unnamed ops likewise

  bool member() const { return rank >= 0; }
  int size() const { return static_cast<int>(ranks.size()); }
  // "process set 2 (ranks [0, 2])"
  std::string describe() const;
  // The set's rows in the timeline are its names with this prefix: "" for the
  // global set, "process_set_2/" for set 2 (the same name on two sets, two rows).
  std::string timeline_prefix() const;
};

class ProcessSetTable {
 public:
  using Clock = std::chrono::steady_clock;

  // `world` is the job's world; everything passed outlives the table.
  ProcessSetTable(World& world, const Config& config, Timeline& timeline, Watchdog& watchdog);
  ~ProcessSetTable();
  ProcessSetTable(const ProcessSetTable&) = delete;
  ProcessSetTable& operator=(const ProcessSetTable&) = delete;

  // ---- the sets (collective calls: every rank of the global set) ----
  // The global set (id 0) on `world`; first, at init.
  void add_global();
  // At init (before the background thread) or on the background thread as the
  // action of the global response of add_process_set()/remove_process_set().
  Status register_set(std::vector<int> ranks, int32_t* id);
  Status unregister_set(int32_t id);
  // After the background thread has stopped: destroys every set but the global
  // one (process sets go before the global communicator) and drains the global
  // set's executor; the global controller stays (its counters).
  void destroy_process_sets();
  ProcessSetState& global() { return *global_; }
  // Background thread: the sets other than the global one that this rank is a
  // member of, ascending by id (the same list on every rank of each set).
  std::vector<ProcessSetState*> member_process_sets();

  // ---- any thread ----
  // Takes ownership of the entry and returns its handle (completed with an error
  // if the name is in flight on the set, the set is unknown, this rank is not a
  // member, or the table is closed). The request's rank becomes this rank's rank
  // in the set. Wakes the background thread for the first request of a batch.
  HandlePtr enqueue(std::unique_ptr<TensorEntry> entry, int32_t set_id);
  // A grouped op's members, atomically: all fail if one cannot be enqueued.
  std::vector<HandlePtr> enqueue_group(std::vector<std::unique_ptr<TensorEntry>> entries, int32_t set_id);
  bool set_info(int32_t set_id, std::vector<int>* ranks, int* rank);
  std::vector<int32_t> set_ids();
  uint64_t next_serial(int32_t set_id, bool barrier);
  // Adds every controller's counters to *stats.
  void add_counters(Stats* stats);

  // Refuses new ops from now on with `status` as the reason, empties every queue
  // and table and returns the entries (the caller completes them); the
  // controllers that were in the table, for the caller to clear on the
  // background thread.
  std::vector<std::unique_ptr<TensorEntry>> close(const Status& status,
                                                  std::vector<negotiation::Controller*>* controllers = nullptr);
  bool closed();
  Status close_reason();  // OK if not closed

  // The background thread's wait: until `deadline`, or at once when stop() says
  // so, or a queue has requests, or (with `in_flight`) a member set has ops in
  // flight. wake() re-evaluates the wait (after `stop` has changed). An idle
  // rank (no process sets, nothing queued or in flight) waits up to kIdleWait
  // past now instead of `deadline`: its next op's enqueue wakes it.
  static constexpr std::chrono::milliseconds kIdleWait{100};
  void wait_for_work(Clock::time_point deadline, bool in_flight, const std::function<bool()>& stop);
  void wake();

  // ---- background thread ----
  // The requests enqueued on the set since the last call.
  std::vector<Request> drain(ProcessSetState& set);
  // This rank's entries for `names` (nullptr where it has none: it joined).
  // They stay valid until take() removes them (only this thread does).
  std::vector<TensorEntry*> lookup(ProcessSetState& set, const std::vector<std::string>& names);
  // Removes the entries for `names` and returns them.
  std::vector<std::unique_ptr<TensorEntry>> take(ProcessSetState& set, const std::vector<std::string>& names);

 private:
  class SetOps;  // ProcessSetState::local_ops
  // Under mu_: no process sets, and no set has requests queued or ops in flight.
  bool idle_locked() const;
  // Under mu_: why `name` cannot be enqueued on the set, or OK and *out = the set.
  Status check_enqueue_locked(int32_t set_id, const std::string& name, ProcessSetState** out);
  // A member's executor, local view and controller (collective over the set).
  void build_member(ProcessSetState& set);
  // Drains and destroys a set's executor, controller and communicators.
  static void destroy(std::unique_ptr<ProcessSetState> set);

  World& world_;
  const Config& config_;
  Timeline& timeline_;
  Watchdog& watchdog_;

  std::mutex mu_;
  std::condition_variable cv_;
  // Every registered set by id (0: global). Changed only at init and on the
  // background thread; read under mu_ elsewhere.
  std::map<int32_t, std::unique_ptr<ProcessSetState>> sets_;
  ProcessSetState* global_ = nullptr;
  int32_t next_set_id_ = 1;  // the same on every rank (sets change in the same order)
  bool closed_ = false;
  Status close_reason_;
};

}  // namespace horovodlite
