#include "horovodlite/torch/async_handle.h"

#include "horovodlite/torch/error.h"

namespace horovodlite {
namespace torch {

AsyncHandle::AsyncHandle(HandlePtr handle, Finisher finish) : state_(std::make_shared<State>()) {
  state_->handle = std::move(handle);
  state_->finish = std::move(finish);
}

const AsyncHandle::State& AsyncHandle::state() const {
  if (!state_ || !state_->handle) {
    throw HorovodError(StatusCode::kInvalidArgument, "use of an empty horovodlite AsyncHandle");
  }
  return *state_;
}

const std::string& AsyncHandle::name() const { return state().handle->name(); }
bool AsyncHandle::poll() const { return state().handle->poll(); }
const HandlePtr& AsyncHandle::core_handle() const { return state().handle; }

bool AsyncHandle::wait_for(std::chrono::milliseconds timeout) const {
  return state().handle->wait(timeout).code() != StatusCode::kTimeout;
}

at::Tensor AsyncHandle::synchronize() const {
  const State& s = state();
  Status status = s.handle->wait();
  if (!status.ok()) {
    throw tensor_error(s.handle->name(), status);
  }
  std::lock_guard<std::mutex> lock(state_->mu);
  if (!state_->finished) {
    state_->result = state_->finish ? state_->finish() : at::Tensor();
    state_->finish = nullptr;  // drop the references it held
    state_->finished = true;
  }
  return state_->result;
}

std::vector<int64_t> AsyncHandle::received_splits() const { return state().handle->received_splits(); }
int AsyncHandle::last_joined_rank() const { return state().handle->last_joined_rank(); }

bool poll(const AsyncHandle& handle) { return handle.poll(); }
at::Tensor synchronize(const AsyncHandle& handle) { return handle.synchronize(); }

}  // namespace torch
}  // namespace horovodlite
