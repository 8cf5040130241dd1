#include "horovodlite/handle.h"

namespace horovodlite {

bool Handle::poll() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

Status Handle::wait() const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return done_; });
  return status_;
}

Status Handle::wait(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [this] { return done_; })) {
    return Status::Timeout("operation '" + name_ + "' did not complete within " + std::to_string(timeout.count()) +
                           " ms");
  }
  return status_;
}

Status Handle::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

void Handle::on_complete(std::function<void(const Status&)> fn) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!done_) {
    callbacks_.push_back(std::move(fn));
    return;
  }
  Status s = status_;
  lock.unlock();
  fn(s);
}

void Handle::complete(Status status) {
  complete_without_waking(std::move(status));
  cv_.notify_all();
}

void Handle::complete_without_waking(Status status) {
  std::vector<std::function<void(const Status&)>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    status_ = std::move(status);
    done_ = true;
    callbacks.swap(callbacks_);
  }
  for (auto& fn : callbacks) fn(status_);
  // Release what the callbacks hold (the tensors an adapter keeps alive) before
  // waking the waiters, so that a woken caller sees its buffers unreferenced.
  callbacks.clear();
}

}  // namespace horovodlite
