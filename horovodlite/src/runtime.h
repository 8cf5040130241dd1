// The runtime: owns the background thread and its lifecycle, the queue of new
// requests, the table of ops in flight, the controller (negotiation over the
// global communicator) and the executor. The single global handle to it lives in
// api.cc.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "controller.h"
#include "entry.h"
#include "execution_observer.h"
#include "executor.h"
#include "horovodlite/config.h"
#include "horovodlite/horovodlite.h"
#include "mpi_context.h"
#include "timeline.h"
#include "watchdog.h"

namespace horovodlite {

class Runtime {
 public:
  static Status start(const InitOptions& options, std::shared_ptr<Runtime>* out);
  ~Runtime();

  // Takes ownership of the entry and returns its handle (already completed with an
  // error if the name is in flight or the runtime has stopped).
  HandlePtr enqueue(std::unique_ptr<TensorEntry> entry);
  // The members of a grouped op, enqueued atomically (the background thread
  // drains them in one cycle). All fail if one cannot be enqueued.
  std::vector<HandlePtr> enqueue_group(std::vector<std::unique_ptr<TensorEntry>> entries);
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
  void run(const Response& response, std::chrono::steady_clock::time_point ready);
  void abort_all(const Status& status);
  // The controller's view of this rank's ops in flight (see Controller::LocalLookup).
  bool find_local(const std::string& name, Request* request, std::chrono::steady_clock::time_point* enqueued);
  // The message ops in flight complete with when the job shuts down.
  std::string shutdown_message(const std::vector<int>& requesters, const std::vector<int>& exiting) const;
  // The watchdog fired: a peer died or hung. Fails every op and aborts the job.
  void on_peer_timeout(const std::string& step, double waited_s);

  // Times the executor's phases for the timeline.
  class TimelineObserver : public ExecutionObserver {
   public:
    explicit TimelineObserver(Timeline& timeline) : timeline_(timeline) {}
    void phase_start(const Response& response, const char* phase) override;
    void phase_end(const Response& response, const char* phase) override;
    bool saw_phase = false;

   private:
    Timeline& timeline_;
    std::chrono::steady_clock::time_point start_;
  };

  Config config_;
  MpiContext mpi_;
  std::unique_ptr<Executor> executor_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Request> queue_;
  std::unordered_map<std::string, std::unique_ptr<TensorEntry>> table_;
  bool shutdown_requested_ = false;
  bool exiting_ = false;
  bool stopped_ = false;
  Status stop_reason_;

  Timeline timeline_;  // internally synchronised (start/stop from any thread)
  TimelineObserver observer_{timeline_};
  std::unique_ptr<Watchdog> watchdog_;
  std::unique_ptr<Controller> controller_;  // background thread only

  std::string stall_reason_;  // background thread: why a stall shutdown happens (every rank)

  struct Counters {
    std::atomic<uint64_t> cycles{0}, responses_executed{0}, fused_tensors{0}, errors{0};
  } counters_;
  std::thread thread_;
};

}  // namespace horovodlite
