#include "horovodlite/torch/collectives.h"


#include <memory>
#include <utility>

#include "horovodlite/torch/error.h"
#include "horovodlite/torch/tensor_util.h"

namespace horovodlite {
namespace torch {
namespace {

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

// An OutputAllocator that allocates a CPU tensor like `like` into *slot.
OutputAllocator allocator_into(std::shared_ptr<at::Tensor> slot, at::TensorOptions options) {
  return [slot, options](const Shape& shape, TensorView* out) -> Status {
    try {
      *slot = at::empty(shape, options);
      *out = make_view(*slot);
      return Status::OK();
    } catch (const std::exception& e) {
      return Status::Internal(std::string("allocating the output tensor failed: ") + e.what());
    }
  };
}

AsyncHandle finish_with_slot(const HandlePtr& handle, std::shared_ptr<at::Tensor> slot) {
  return AsyncHandle(handle, [slot]() { return *slot; });
}

}  // namespace

AsyncHandle allreduce_async(const at::Tensor& tensor, const std::string& name, const AllreduceOptions& options) {
  check_tensor(tensor, "allreduce");
  at::Tensor input = contiguous_input(tensor);
  at::Tensor output = at::empty_like(input, at::MemoryFormat::Contiguous);
  HandlePtr handle = horovodlite::allreduce_async(name, make_view(input), make_view(output), options);
  keep_alive(handle, {input, output});
  return AsyncHandle(handle, [output]() { return output; });
}

AsyncHandle allreduce_async_(const at::Tensor& tensor, const std::string& name, const AllreduceOptions& options) {
  check_tensor(tensor, "allreduce_");
  at::Tensor buffer = in_place_buffer(tensor);
  TensorView view = make_view(buffer);
  HandlePtr handle = horovodlite::allreduce_async(name, view, view, options);
  keep_alive(handle, {tensor, buffer});
  return AsyncHandle(handle, finish_in_place(tensor, buffer));
}

at::Tensor allreduce(const at::Tensor& tensor, const std::string& name, const AllreduceOptions& options) {
  return allreduce_async(tensor, name, options).synchronize();
}

at::Tensor allreduce_(const at::Tensor& tensor, const std::string& name, const AllreduceOptions& options) {
  return allreduce_async_(tensor, name, options).synchronize();
}

AsyncHandle allgather_async(const at::Tensor& tensor, const std::string& name) {
  check_tensor(tensor, "allgather");
  at::Tensor input = contiguous_input(tensor);
  auto slot = std::make_shared<at::Tensor>();
  HandlePtr handle = horovodlite::allgather_async(name, make_view(input), allocator_into(slot, input.options()));
  keep_alive(handle, {input});
  return finish_with_slot(handle, slot);
}

at::Tensor allgather(const at::Tensor& tensor, const std::string& name) {
  return allgather_async(tensor, name).synchronize();
}

AsyncHandle broadcast_async(const at::Tensor& tensor, int root_rank, const std::string& name) {
  check_tensor(tensor, "broadcast");
  at::Tensor output;
  {
    at::NoGradGuard no_grad;
    output = tensor.clone(at::MemoryFormat::Contiguous);
  }
  HandlePtr handle = horovodlite::broadcast_async(name, make_view(output), root_rank);
  keep_alive(handle, {output});
  return AsyncHandle(handle, [output]() { return output; });
}

AsyncHandle broadcast_async_(const at::Tensor& tensor, int root_rank, const std::string& name) {
  check_tensor(tensor, "broadcast_");
  at::Tensor buffer = in_place_buffer(tensor);
  HandlePtr handle = horovodlite::broadcast_async(name, make_view(buffer), root_rank);
  keep_alive(handle, {tensor, buffer});
  return AsyncHandle(handle, finish_in_place(tensor, buffer));
}

at::Tensor broadcast(const at::Tensor& tensor, int root_rank, const std::string& name) {
  return broadcast_async(tensor, root_rank, name).synchronize();
}

at::Tensor broadcast_(const at::Tensor& tensor, int root_rank, const std::string& name) {
  return broadcast_async_(tensor, root_rank, name).synchronize();
}

AsyncHandle alltoall_async(const at::Tensor& tensor, const std::vector<int64_t>& splits, const std::string& name) {
  check_tensor(tensor, "alltoall");
  at::Tensor input = contiguous_input(tensor);
  auto slot = std::make_shared<at::Tensor>();
  HandlePtr handle =
      horovodlite::alltoall_async(name, make_view(input), splits, allocator_into(slot, input.options()));
  keep_alive(handle, {input});
  return finish_with_slot(handle, slot);
}

AlltoallResult alltoall(const at::Tensor& tensor, const std::vector<int64_t>& splits, const std::string& name) {
  AsyncHandle handle = alltoall_async(tensor, splits, name);
  AlltoallResult result;
  result.output = handle.synchronize();
  result.received_splits = handle.received_splits();
  return result;
}

AsyncHandle reducescatter_async(const at::Tensor& tensor, const std::string& name,
                                const ReducescatterOptions& options) {
  check_tensor(tensor, "reducescatter");
  at::Tensor input = contiguous_input(tensor);
  auto slot = std::make_shared<at::Tensor>();
  HandlePtr handle =
      horovodlite::reducescatter_async(name, make_view(input), allocator_into(slot, input.options()), options);
  keep_alive(handle, {input});
  return finish_with_slot(handle, slot);
}

at::Tensor reducescatter(const at::Tensor& tensor, const std::string& name, const ReducescatterOptions& options) {
  return reducescatter_async(tensor, name, options).synchronize();
}

AsyncHandle join_async() { return AsyncHandle(horovodlite::join_async(), nullptr); }

int join() {
  AsyncHandle handle = join_async();
  handle.synchronize();
  return handle.last_joined_rank();
}

void barrier() { AsyncHandle(horovodlite::barrier_async(), nullptr).synchronize(); }

}  // namespace torch
}  // namespace horovodlite
