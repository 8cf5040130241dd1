// Completes the handles of device ops on the host once their completion events
// have fired. One small thread polls the oldest event with cudaEventQuery and a
// growing sleep (never a spin, never a device-wide synchronise); events on the
// core's one stream complete in order, so only the oldest needs watching.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cuda/cuda_event.h"
#include "entry.h"

namespace horovodlite {
namespace cuda {

class CompletionQueue {
 public:
  CompletionQueue();
  ~CompletionQueue();  // drains, then stops the thread
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  // The entries' handles complete with `status` (or with the device error, if the
  // event reports one) once `event` has completed. Keeps the entries (and so the
  // framework's tensors, through the handles' callbacks) alive until then.
  void push(std::shared_ptr<CudaEvent> event, std::vector<std::unique_ptr<TensorEntry>> entries, Status status);
  // Blocks until everything pushed so far has completed.
  void drain();

 private:
  struct Item {
    std::shared_ptr<CudaEvent> event;
    std::vector<std::unique_ptr<TensorEntry>> entries;
    Status status;
  };
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;       // work arrived / stop
  std::condition_variable idle_cv_;  // the queue became empty
  std::deque<Item> items_;
  bool busy_ = false;  // the thread holds an item outside the queue
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace cuda
}  // namespace horovodlite
