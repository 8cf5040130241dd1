#include "cuda/device_context.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "cuda/cuda_status.h"
#include "logging.h"

namespace horovodlite {
namespace cuda {

namespace {

// Completes the entries once the event has fired (from the completion thread).
class EventCompletion : public DeferredCompletion {
 public:
  EventCompletion(std::shared_ptr<CudaEvent> event, CompletionQueue& queue) : event_(std::move(event)), queue_(queue) {}
  void complete(std::vector<std::unique_ptr<TensorEntry>> entries, const Status& status) override {
    for (auto& e : entries) e->handle->set_completion_event(event_);
    queue_.push(event_, std::move(entries), status);
  }

 private:
  std::shared_ptr<CudaEvent> event_;
  CompletionQueue& queue_;
};

}  // namespace

DeviceContext::~DeviceContext() {
  completions_.drain();
  if (stream_ != nullptr) {
    cudaSetDevice(device_);
    fusion_.release();
    cudaStreamSynchronize(stream_);
    comm_.reset();
    cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }
}

Status DeviceContext::begin(const std::vector<TensorEntry*>& entries, bool* repeated) {
  int device = -1;
  for (TensorEntry* e : entries) {
    if (e == nullptr) continue;
    if (device >= 0 && e->input.device != device) {
      // Still take part (with this rank's first device) so that no rank is left waiting.
      HVL_LOG(kError, "fused tensors of one rank are on different GPUs");
    }
    if (device < 0) device = e->input.device;
  }
  if (device < 0) {
    // A joined rank: it contributes zeros on the GPU it used before (or its local one).
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) count = 1;
    device = device_ >= 0 ? device_ : world_.local_rank() % count;
  }
  return ensure(device, repeated);
}

Status DeviceContext::ensure(int device, bool* repeated) {
  if (stream_ != nullptr) {
    if (device != device_) {
      return Status::InvalidArgument("this rank's device collectives use cuda:" + std::to_string(device_) +
                                     "; a tensor on cuda:" + std::to_string(device) +
                                     " cannot join them (one GPU per rank)");
    }
    HVL_CUDA_CHECK(cudaSetDevice(device));
    return Status::OK();
  }
  if (!setup_error_.ok()) {
    // Not retried: every later device op fails with the error of the first
    // (reported once, with the op that met it).
    *repeated = true;
    return setup_error_;
  }
  // The first device response: every rank is here now. Agree that every rank
  // has its GPU before the collective NCCL set-up, so that a failure is an error
  // everywhere instead of a hang.
  Status local = cuda_status(cudaSetDevice(device), "cudaSetDevice");
  if (local.ok()) {
    local = cuda_status(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
  Status s = world_.agree(local, "device set-up", "its GPU could not be set up");
  if (s.ok() && config_.gpu_operations == Config::GpuOperations::kNccl) {
    // Two ranks on one GPU: one clear error on every rank, before NCCL fails
    // (the same on every rank: each sees every rank's GPU).
    s = check_one_gpu_per_rank(world_.mpi()->comm(), device);
    if (s.ok()) s = NcclComm::create(world_.mpi()->comm(), device, &comm_);
  }
  if (!s.ok()) {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    stream_ = nullptr;
    setup_error_ = s;
    return s;
  }
  device_ = device;
  HVL_LOG(kDebug, "device collectives on cuda:" << device << (comm_ ? " with NCCL" : " through the host"));
  return Status::OK();
}

Status DeviceContext::wait_ready(const std::vector<TensorEntry*>& entries) {
  for (TensorEntry* e : entries) {
    if (e == nullptr || e->ready == nullptr) continue;
    if (void* ev = e->ready->cuda_event()) {
      HVL_CUDA_CHECK(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(ev), 0));
      continue;
    }
    // A ready event without a CUDA event: poll it, sleeping between polls.
    auto sleep = std::chrono::microseconds(5);
    while (!e->ready->ready()) {
      std::this_thread::sleep_for(sleep);
      sleep = std::min(sleep * 2, std::chrono::microseconds(1000));
    }
  }
  return Status::OK();
}

std::shared_ptr<DeferredCompletion> DeviceContext::finish(Status* status) {
  std::shared_ptr<CudaEvent> event;
  Status s = CudaEvent::record(stream_, &event);
  if (!s.ok()) {
    if (status->ok()) *status = s;
    return nullptr;
  }
  return std::make_shared<EventCompletion>(std::move(event), completions_);
}

void* DeviceContext::fusion(size_t bytes, Status* s) {
  cudaError_t err;
  void* p = fusion_.get(std::max<size_t>(bytes, 256), stream_, &err);
  if (p == nullptr) *s = cuda_status(err, "cudaMallocAsync (device fusion buffer)");
  return p;
}

OpResult DeviceAlgorithm::run(const OpArgs& args) {
  bool repeated = false;
  Status s = ctx_->begin(args.entries, &repeated);
  if (!s.ok()) {
    OpResult failed{s, name()};
    failed.reported = repeated;
    return failed;
  }
  s = ctx_->wait_ready(args.entries);
  OpOutputs outputs;
  if (s.ok()) s = enqueue(args, &outputs);
  OpResult result{s, name(), std::move(outputs)};
  result.deferred = ctx_->finish(&result.status);
  return result;
}

}  // namespace cuda
}  // namespace horovodlite
