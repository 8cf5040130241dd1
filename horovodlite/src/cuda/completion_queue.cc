#include "cuda/completion_queue.h"

#include <algorithm>
#include <chrono>

#include "cuda/cuda_status.h"

namespace horovodlite {
namespace cuda {

Status CudaEvent::record(cudaStream_t stream, std::shared_ptr<CudaEvent>* out) {
  std::shared_ptr<CudaEvent> e(new CudaEvent());
  HVL_CUDA_CHECK(cudaEventCreateWithFlags(&e->event_, cudaEventDisableTiming));
  HVL_CUDA_CHECK(cudaEventRecord(e->event_, stream));
  *out = std::move(e);
  return Status::OK();
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) cudaEventDestroy(event_);  // fails harmlessly after CUDA's teardown at exit
}

CompletionQueue::CompletionQueue() : thread_([this] { loop(); }) {}

CompletionQueue::~CompletionQueue() {
  drain();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CompletionQueue::push(std::shared_ptr<CudaEvent> event, std::vector<std::unique_ptr<TensorEntry>> entries,
                           Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    items_.push_back(Item{std::move(event), std::move(entries), std::move(status)});
  }
  cv_.notify_one();
}

void CompletionQueue::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [this] { return items_.empty() && !busy_; });
}

void CompletionQueue::loop() {
  while (true) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !items_.empty(); });
      if (items_.empty()) return;  // stop_ and nothing left
      item = std::move(items_.front());
      items_.pop_front();
      busy_ = true;
    }
    // Small ops finish within microseconds, long ones are polled at most every 0.5 ms.
    cudaError_t rc;
    int polls = 0;
    auto sleep = std::chrono::microseconds(5);
    while ((rc = cudaEventQuery(item.event->get())) == cudaErrorNotReady) {
      if (++polls < 4) {
        std::this_thread::yield();
        continue;
      }
      std::this_thread::sleep_for(sleep);
      sleep = std::min(sleep * 2, std::chrono::microseconds(500));
    }
    Status s = item.status;
    if (s.ok() && rc != cudaSuccess) s = cuda_status(rc, "device work of a collective (cudaEventQuery)");
    for (auto& e : item.entries) e->handle->complete(s);
    item.entries.clear();  // drop the entries (and the tensors they keep) before going idle
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
      if (items_.empty()) idle_cv_.notify_all();
    }
  }
}

}  // namespace cuda
}  // namespace horovodlite
