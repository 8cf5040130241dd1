#include "horovodlite/torch/collectives.h"

#include <ATen/core/grad_mode.h>

#include <memory>
#include <utility>

#include "horovodlite/torch/error.h"
#include "horovodlite/torch/output_pool.h"
#include "horovodlite/torch/tensor_util.h"

#ifdef HVL_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace horovodlite {
namespace torch {
namespace {

// ---- CUDA tensors: ordering with torch's streams through events (docs/gpu.md) ----
#ifdef HVL_TORCH_CUDA
// An event on the stream that was current when the op was enqueued: the core's
// stream waits on it before reading the input. The output allocator re-records it
// after allocating (so the core also waits for earlier users of that memory).
class TorchReadyEvent : public ReadyEvent {
 public:
  explicit TorchReadyEvent(const at::Tensor& tensor)
      : device_(tensor.device().index()), stream_(at::cuda::getCurrentCUDAStream(device_)) {
    c10::cuda::CUDAGuard guard(device_);
    cudaError_t rc = cudaEventCreateWithFlags(&event_, cudaEventDisableTiming);
    if (rc != cudaSuccess) {
      throw HorovodError(StatusCode::kInternal,
                         std::string("cudaEventCreateWithFlags failed: ") + cudaGetErrorString(rc));
    }
    record();
  }
  ~TorchReadyEvent() override { cudaEventDestroy(event_); }
  void record() {
    c10::cuda::CUDAGuard guard(device_);
    cudaError_t rc = cudaEventRecord(event_, stream_.stream());
    if (rc != cudaSuccess) {
      throw HorovodError(StatusCode::kInternal, std::string("cudaEventRecord failed: ") + cudaGetErrorString(rc));
    }
  }
  bool ready() const override { return cudaEventQuery(event_) != cudaErrorNotReady; }
  void* cuda_event() const override { return event_; }
  const c10::cuda::CUDAStream& stream() const { return stream_; }

 private:
  c10::DeviceIndex device_;
  c10::cuda::CUDAStream stream_;
  cudaEvent_t event_ = nullptr;
};
using TorchReadyEventPtr = std::shared_ptr<TorchReadyEvent>;

// Records the ready event for a CUDA tensor (after the adapter's own copies of
// it on the current stream); nullptr for CPU tensors.
TorchReadyEventPtr ready_event(const at::Tensor& tensor) {
  return tensor.is_cuda() ? std::make_shared<TorchReadyEvent>(tensor) : nullptr;
}

// Makes the finisher (run on the first synchronize()) first order the caller's
// current stream after the op's device work, so that the result can be used on
// it. The handle has completed on the host by then, so this never blocks.
AsyncHandle::Finisher on_device(const HandlePtr& handle, const at::Tensor& tensor, AsyncHandle::Finisher finish) {
  if (!tensor.is_cuda()) return finish;
  const c10::DeviceIndex device = tensor.device().index();
  return [handle, device, finish = std::move(finish)]() {
    if (const ReadyEventPtr& done = handle->completion_event()) {
      if (void* ev = done->cuda_event()) {
        cudaError_t rc =
            cudaStreamWaitEvent(at::cuda::getCurrentCUDAStream(device).stream(), static_cast<cudaEvent_t>(ev), 0);
        if (rc != cudaSuccess) {
          throw HorovodError(StatusCode::kInternal,
                             std::string("cudaStreamWaitEvent failed: ") + cudaGetErrorString(rc));
        }
      }
    }
    return finish ? finish() : at::Tensor();
  };
}
#else
struct TorchReadyEvent : ReadyEvent {
  bool ready() const override { return true; }
};
using TorchReadyEventPtr = std::shared_ptr<TorchReadyEvent>;
TorchReadyEventPtr ready_event(const at::Tensor&) { return nullptr; }  // CPU only: check_tensor rejects CUDA
AsyncHandle::Finisher on_device(const HandlePtr&, const at::Tensor&, AsyncHandle::Finisher finish) { return finish; }
#endif

// Keeps `tensors` referenced until the core completes the op, so that dropping
// the AsyncHandle early cannot free memory the background thread still uses.
void keep_alive(const HandlePtr& handle, std::vector<at::Tensor> tensors) {
  handle->on_complete([tensors = std::move(tensors)](const Status&) {});
}

// The contiguous tensor the core works on in place: `tensor` itself when it is
// contiguous, else a contiguous copy that finish_in_place() copies back.
at::Tensor in_place_buffer(const at::Tensor& tensor) {
  if (tensor.is_contiguous()) return tensor;
  at::NoGradGuard no_grad;
  return tensor.contiguous();
}

AsyncHandle::Finisher finish_in_place(const at::Tensor& tensor, const at::Tensor& buffer) {
  return [tensor, buffer]() {
    if (!buffer.is_same(tensor)) {
      at::NoGradGuard no_grad;
      tensor.copy_(buffer);
    }
    return tensor;
  };
}

at::Tensor contiguous_input(const at::Tensor& tensor) {
  at::NoGradGuard no_grad;
  return tensor.contiguous();
}

// An OutputAllocator that allocates a tensor with `options` into *slot. CUDA: on
// the stream that was current at enqueue (the consumer's), then re-records the
// ready event there, so that the core's stream also waits for the earlier users
// of the memory the caching allocator hands out.
// `dtype`: the options' dtype, as check_tensor() returned it for the input.
OutputAllocator allocator_into(std::shared_ptr<at::Tensor> slot, at::TensorOptions options, DataType dtype,
                               TorchReadyEventPtr ready = nullptr) {
  return [slot, options, dtype, ready](const Shape& shape, TensorView* out) -> Status {
    try {
#ifdef HVL_TORCH_CUDA
      if (ready != nullptr) {
        c10::cuda::CUDAStreamGuard guard(ready->stream());
        *slot = at::empty(shape, options);
        ready->record();
      } else {
        *slot = at::empty(shape, options);
      }
#else
      *slot = at::empty(shape, options);
#endif
      *out = make_checked_view(*slot, dtype);
      return Status::OK();
    } catch (const std::exception& e) {
      return Status::Internal(std::string("allocating the output tensor failed: ") + e.what());
    }
  };
}

AsyncHandle finish_with_slot(const HandlePtr& handle, std::shared_ptr<at::Tensor> slot, const at::Tensor& like) {
  return AsyncHandle(handle, on_device(handle, like, [slot]() { return *slot; }));
}

}  // namespace

AsyncHandle allreduce_async(const at::Tensor& tensor, const std::string& name, const AllreduceOptions& options) {
  const DataType dtype = check_tensor(tensor, "allreduce");
  at::Tensor input = contiguous_input(tensor);
  // A fresh tensor on a reused storage once a steady state is reached: no page
  // faults per call for large outputs (output_pool.h).
  at::Tensor output = OutputPool::global().take(input);
  HandlePtr handle = horovodlite::allreduce_async(name, make_checked_view(input, dtype),
                                                  make_checked_view(output, dtype), options, ready_event(input));
  keep_alive(handle, {input, output});
  return AsyncHandle(handle, on_device(handle, input, [output]() { return output; }));
}

AsyncHandle allreduce_async(const at::Tensor& input, const at::Tensor& output, const std::string& name,
                            const AllreduceOptions& options) {
  const DataType in_dtype = check_tensor(input, "allreduce");
  const DataType out_dtype = check_tensor(output, "allreduce (output)");
  check_argument(output.is_contiguous(), "allreduce: output must be contiguous");
  at::Tensor in = contiguous_input(input);
  const TensorView in_view = make_checked_view(in, in_dtype);
  TensorView out_view = make_checked_view(output, out_dtype);
  // The core's rule (dtype, size, device, no partial overlap), raised at the call.
  throw_if_error(horovodlite::check_allreduce_output(name, in_view, out_view));
  // The core's output takes the input's shape (same numel, contiguous).
  out_view.shape = in_view.shape;
  const bool same = in.numel() == 0 || in.data_ptr() == output.data_ptr();
  HandlePtr handle = horovodlite::allreduce_async(name, same ? out_view : in_view, out_view, options, ready_event(in));
  keep_alive(handle, {in, output});
  return AsyncHandle(handle, on_device(handle, output, [output]() { return output; }));
}

AsyncHandle allreduce_async_(const at::Tensor& tensor, const std::string& name, const AllreduceOptions& options) {
  const DataType dtype = check_tensor(tensor, "allreduce_");
  at::Tensor buffer = in_place_buffer(tensor);
  TensorView view = make_checked_view(buffer, dtype);
  HandlePtr handle = horovodlite::allreduce_async(name, view, view, options, ready_event(buffer));
  keep_alive(handle, {tensor, buffer});
  return AsyncHandle(handle, on_device(handle, buffer, finish_in_place(tensor, buffer)));
}

at::Tensor allreduce(const at::Tensor& tensor, const std::string& name, const AllreduceOptions& options) {
  return allreduce_async(tensor, name, options).synchronize();
}

at::Tensor allreduce_(const at::Tensor& tensor, const std::string& name, const AllreduceOptions& options) {
  return allreduce_async_(tensor, name, options).synchronize();
}

AsyncHandle allgather_async(const at::Tensor& tensor, const std::string& name, const ProcessSet& process_set) {
  const DataType dtype = check_tensor(tensor, "allgather");
  at::Tensor input = contiguous_input(tensor);
  auto slot = std::make_shared<at::Tensor>();
  TorchReadyEventPtr ready = ready_event(input);
  HandlePtr handle = horovodlite::allgather_async(name, make_checked_view(input, dtype),
                                                  allocator_into(slot, input.options(), dtype, ready),
                                                  AllgatherOptions{process_set}, ready);
  keep_alive(handle, {input});
  return finish_with_slot(handle, slot, input);
}

at::Tensor allgather(const at::Tensor& tensor, const std::string& name, const ProcessSet& process_set) {
  return allgather_async(tensor, name, process_set).synchronize();
}

AsyncHandle broadcast_async(const at::Tensor& tensor, int root_rank, const std::string& name,
                            const ProcessSet& process_set) {
  const DataType dtype = check_tensor(tensor, "broadcast");
  at::Tensor output;
  {
    at::NoGradGuard no_grad;
    output = tensor.clone(at::MemoryFormat::Contiguous);
  }
  HandlePtr handle = horovodlite::broadcast_async(name, make_checked_view(output, dtype), root_rank,
                                                  BroadcastOptions{process_set}, ready_event(output));
  keep_alive(handle, {output});
  return AsyncHandle(handle, on_device(handle, output, [output]() { return output; }));
}

AsyncHandle broadcast_async_(const at::Tensor& tensor, int root_rank, const std::string& name,
                             const ProcessSet& process_set) {
  const DataType dtype = check_tensor(tensor, "broadcast_");
  at::Tensor buffer = in_place_buffer(tensor);
  HandlePtr handle = horovodlite::broadcast_async(name, make_checked_view(buffer, dtype), root_rank,
                                                  BroadcastOptions{process_set}, ready_event(buffer));
  keep_alive(handle, {tensor, buffer});
  return AsyncHandle(handle, on_device(handle, buffer, finish_in_place(tensor, buffer)));
}

at::Tensor broadcast(const at::Tensor& tensor, int root_rank, const std::string& name, const ProcessSet& process_set) {
  return broadcast_async(tensor, root_rank, name, process_set).synchronize();
}

at::Tensor broadcast_(const at::Tensor& tensor, int root_rank, const std::string& name, const ProcessSet& process_set) {
  return broadcast_async_(tensor, root_rank, name, process_set).synchronize();
}

AsyncHandle alltoall_async(const at::Tensor& tensor, const std::vector<int64_t>& splits, const std::string& name,
                           const ProcessSet& process_set) {
  const DataType dtype = check_tensor(tensor, "alltoall");
  at::Tensor input = contiguous_input(tensor);
  auto slot = std::make_shared<at::Tensor>();
  TorchReadyEventPtr ready = ready_event(input);
  HandlePtr handle = horovodlite::alltoall_async(name, make_checked_view(input, dtype), splits,
                                                 allocator_into(slot, input.options(), dtype, ready),
                                                 AlltoallOptions{process_set}, ready);
  keep_alive(handle, {input});
  return finish_with_slot(handle, slot, input);
}

AlltoallResult alltoall(const at::Tensor& tensor, const std::vector<int64_t>& splits, const std::string& name,
                        const ProcessSet& process_set) {
  AsyncHandle handle = alltoall_async(tensor, splits, name, process_set);
  AlltoallResult result;
  result.output = handle.synchronize();
  result.received_splits = handle.received_splits();
  return result;
}

AsyncHandle reducescatter_async(const at::Tensor& tensor, const std::string& name,
                                const ReducescatterOptions& options) {
  const DataType dtype = check_tensor(tensor, "reducescatter");
  at::Tensor input = contiguous_input(tensor);
  auto slot = std::make_shared<at::Tensor>();
  TorchReadyEventPtr ready = ready_event(input);
  HandlePtr handle = horovodlite::reducescatter_async(
      name, make_checked_view(input, dtype), allocator_into(slot, input.options(), dtype, ready), options, ready);
  keep_alive(handle, {input});
  return finish_with_slot(handle, slot, input);
}

at::Tensor reducescatter(const at::Tensor& tensor, const std::string& name, const ReducescatterOptions& options) {
  return reducescatter_async(tensor, name, options).synchronize();
}

namespace {

std::vector<std::string> group_names(const std::vector<std::string>& names, size_t count, const char* what) {
  check_argument(names.empty() || names.size() == count, std::string(what) + ": " + std::to_string(names.size()) +
                                                             " names for " + std::to_string(count) + " tensors");
  return names.empty() ? std::vector<std::string>(count) : names;
}

// The core returns one handle per tensor, or, for a group it refuses before
// there are per-tensor handles (no tensors at all), one failed handle named
// after the op: that error is raised here, at the call, instead of returning
// no handle to carry it.
void check_one_per_tensor(const std::vector<HandlePtr>& handles, size_t count, const char* what) {
  if (handles.size() == count) return;
  Status s = handles.empty() ? Status::OK() : handles[0]->wait();
  if (s.ok()) {
    s = Status::Internal(std::string(what) + ": the core returned " + std::to_string(handles.size()) + " handles for " +
                         std::to_string(count) + " tensors");
  }
  throw HorovodError(s);
}

std::vector<AsyncHandle> grouped_allreduce(const std::vector<at::Tensor>& tensors,
                                           const std::vector<std::string>& names, const AllreduceOptions& options,
                                           bool in_place) {
  const char* what = in_place ? "grouped_allreduce_" : "grouped_allreduce";
  std::vector<at::Tensor> inputs, outputs;
  std::vector<TensorView> in_views, out_views;
  std::vector<ReadyEventPtr> ready;
  for (const at::Tensor& t : tensors) {
    const DataType dtype = check_tensor(t, what);
    at::Tensor in = in_place ? in_place_buffer(t) : contiguous_input(t);
    at::Tensor out = in_place ? in : at::empty_like(in, at::MemoryFormat::Contiguous);
    inputs.push_back(in);
    outputs.push_back(out);
    in_views.push_back(make_checked_view(in, dtype));
    out_views.push_back(make_checked_view(out, dtype));
    ready.push_back(ready_event(in));
  }
  std::vector<HandlePtr> handles = horovodlite::grouped_allreduce_async(group_names(names, tensors.size(), what),
                                                                        in_views, out_views, options, ready);
  check_one_per_tensor(handles, tensors.size(), what);
  std::vector<AsyncHandle> out;
  for (size_t i = 0; i < handles.size(); ++i) {
    keep_alive(handles[i], {tensors[i], inputs[i], outputs[i]});
    AsyncHandle::Finisher finish =
        in_place ? finish_in_place(tensors[i], inputs[i]) : AsyncHandle::Finisher([o = outputs[i]]() { return o; });
    out.emplace_back(handles[i], on_device(handles[i], inputs[i], std::move(finish)));
  }
  return out;
}

// allgather / reducescatter: outputs allocated after negotiation.
template <typename Submit>
std::vector<AsyncHandle> grouped_allocating(const std::vector<at::Tensor>& tensors, const char* what, Submit submit) {
  std::vector<at::Tensor> inputs;
  std::vector<TensorView> views;
  std::vector<OutputAllocator> allocators;
  std::vector<ReadyEventPtr> ready;
  std::vector<std::shared_ptr<at::Tensor>> slots;
  for (const at::Tensor& t : tensors) {
    const DataType dtype = check_tensor(t, what);
    at::Tensor in = contiguous_input(t);
    auto slot = std::make_shared<at::Tensor>();
    TorchReadyEventPtr r = ready_event(in);
    inputs.push_back(in);
    views.push_back(make_checked_view(in, dtype));
    allocators.push_back(allocator_into(slot, in.options(), dtype, r));
    ready.push_back(r);
    slots.push_back(slot);
  }
  std::vector<HandlePtr> handles = submit(views, allocators, ready);
  check_one_per_tensor(handles, tensors.size(), what);
  std::vector<AsyncHandle> out;
  for (size_t i = 0; i < handles.size(); ++i) {
    keep_alive(handles[i], {inputs[i]});
    out.push_back(finish_with_slot(handles[i], slots[i], inputs[i]));
  }
  return out;
}

}  // namespace

std::vector<AsyncHandle> grouped_allreduce_async(const std::vector<at::Tensor>& tensors,
                                                 const std::vector<std::string>& names,
                                                 const AllreduceOptions& options) {
  return grouped_allreduce(tensors, names, options, false);
}

std::vector<AsyncHandle> grouped_allreduce_async_(const std::vector<at::Tensor>& tensors,
                                                  const std::vector<std::string>& names,
                                                  const AllreduceOptions& options) {
  return grouped_allreduce(tensors, names, options, true);
}

std::vector<AsyncHandle> grouped_allgather_async(const std::vector<at::Tensor>& tensors,
                                                 const std::vector<std::string>& names, const ProcessSet& process_set) {
  const auto n = group_names(names, tensors.size(), "grouped_allgather");
  return grouped_allocating(tensors, "grouped_allgather",
                            [&](const auto& views, const auto& allocs, const auto& ready) {
                              return horovodlite::grouped_allgather_async(n, views, allocs, ready, {}, process_set);
                            });
}

std::vector<AsyncHandle> grouped_reducescatter_async(const std::vector<at::Tensor>& tensors,
                                                     const std::vector<std::string>& names,
                                                     const ReducescatterOptions& options) {
  const auto n = group_names(names, tensors.size(), "grouped_reducescatter");
  return grouped_allocating(tensors, "grouped_reducescatter",
                            [&](const auto& views, const auto& allocs, const auto& ready) {
                              return horovodlite::grouped_reducescatter_async(n, views, allocs, options, ready);
                            });
}

AsyncHandle join_async() { return AsyncHandle(horovodlite::join_async(), nullptr); }

int join() {
  AsyncHandle handle = join_async();
  handle.synchronize();
  return handle.last_joined_rank();
}

void barrier(const ProcessSet& process_set) {
  AsyncHandle(horovodlite::barrier_async(BarrierOptions{process_set}), nullptr).synchronize();
}

ProcessSet add_process_set(const std::vector<int>& ranks) {
  ProcessSet out;
  throw_if_error(horovodlite::add_process_set(ranks, &out));
  return out;
}

void remove_process_set(const ProcessSet& process_set) { throw_if_error(horovodlite::remove_process_set(process_set)); }

}  // namespace torch
}  // namespace horovodlite
