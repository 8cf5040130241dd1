// The runtime: owns the background thread, the queue of new requests, the table
// of ops in flight, the coordinator (rank 0), the response cache and the executor.
// The single global handle to it lives in api.cc.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "coordinator.h"
#include "entry.h"
#include "executor.h"
#include "horovodlite/config.h"
#include "horovodlite/horovodlite.h"
#include "mpi_context.h"
#include "response_cache.h"

namespace horovodlite {

class Runtime {
 public:
  static Status start(const InitOptions& options, std::shared_ptr<Runtime>* out);
  ~Runtime();

  // Takes ownership of the entry and returns its handle (already completed with an
  // error if the name is in flight or the runtime has stopped).
  HandlePtr enqueue(std::unique_ptr<TensorEntry> entry);
  // Asks every rank to stop (through the next cycle) and joins the thread.
  Status stop();

  const MpiContext& mpi() const { return mpi_; }
  const Config& config() const { return config_; }
  Stats stats() const;

 private:
  Runtime() = default;
  void loop();
  // One negotiation cycle; false once the runtime has shut down.
  bool cycle();
  Status negotiate(std::vector<Response>* out);
  void run(const Response& response);
  void cache_negotiated(const std::vector<Response>& negotiated);
  void abort_all(const Status& status);

  Config config_;
  MpiContext mpi_;
  std::unique_ptr<Coordinator> coordinator_;  // rank 0 only
  ResponseCache cache_;
  std::unique_ptr<Executor> executor_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Request> queue_;
  std::unordered_map<std::string, std::unique_ptr<TensorEntry>> table_;
  bool shutdown_requested_ = false;
  bool stopped_ = false;
  Status stop_reason_;

  // Background thread only.
  std::vector<Request> pending_cached_;
  std::vector<Request> uncached_;
  bool joined_ = false;
  std::string send_buf_, recv_buf_;
  std::vector<uint64_t> bits_;

  struct Counters {
    std::atomic<uint64_t> cycles{0}, negotiations{0}, cache_hits{0}, tensors_negotiated{0}, responses_executed{0},
        fused_tensors{0}, errors{0};
  } counters_;
  std::thread thread_;
};

}  // namespace horovodlite
