#include "horovodlite/torch/output_pool.h"

#include <ATen/core/grad_mode.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "host_memory.h"

namespace horovodlite {
namespace torch {
namespace {

// A fresh tensor (new TensorImpl, no autograd history) on `storage`.
at::Tensor on_storage(const c10::Storage& storage, const at::Tensor& like) {
  at::NoGradGuard no_grad;
  at::Tensor t = at::empty({0}, like.options().memory_format(c10::nullopt));
  t.set_(storage, 0, like.sizes());
  return t;
}

// A new contiguous CPU tensor like `like`. From HostBuffer::kHugePage up its
// storage is a HostBuffer (host_memory.h: 2 MiB aligned, on transparent huge
// pages), as the core's own buffers: the allgather sends the result out of
// it, and a peer's single copy pins huge pages far faster than 4 KiB ones. The
// storage stays resizable through LibTorch's CPU allocator.
at::Tensor fresh_output(const at::Tensor& like, size_t nbytes) {
  if (nbytes >= HostBuffer::kHugePage) {
    auto buffer = std::make_unique<HostBuffer>(nbytes);
    if (buffer->data() != nullptr) {
      char* data = buffer->data();
      c10::DataPtr ptr(
          data, buffer.release(), [](void* ctx) { delete static_cast<HostBuffer*>(ctx); },
          c10::Device(c10::DeviceType::CPU));
      c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, std::move(ptr), c10::GetCPUAllocator(), true);
      return on_storage(storage, like);
    }
  }
  return at::empty(like.sizes(), like.options().memory_format(at::MemoryFormat::Contiguous));
}

// Only the pool references it: no tensor, view or Python storage object does.
bool unused(const c10::Storage& s) { return s.use_count() == 1; }

}  // namespace

OutputPool& OutputPool::global() {
  static OutputPool* pool = new OutputPool();  // leaked: outlives tensors freed at exit
  return *pool;
}

at::Tensor OutputPool::take(const at::Tensor& like) {
  const size_t nbytes = static_cast<size_t>(like.numel()) * like.element_size();
  if (!like.device().is_cpu() || nbytes < kMinBytes) {
    return at::empty(like.sizes(), like.options().memory_format(at::MemoryFormat::Contiguous));
  }
  if (nbytes > kMaxBytes) return fresh_output(like, nbytes);
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < storages_.size(); ++i) {
    if (storages_[i].nbytes() == nbytes && unused(storages_[i])) {
      c10::Storage s = storages_[i];
      // Most recently used last: eviction takes the front.
      std::rotate(storages_.begin() + i, storages_.begin() + i + 1, storages_.end());
      return on_storage(s, like);
    }
  }
  at::Tensor fresh = fresh_output(like, nbytes);
  // Make room by dropping unused storages, oldest first; storages in use stay
  // (they leave the pool only when free, so the bounds hold for what it owns).
  for (size_t i = 0; i < storages_.size() && (storages_.size() >= kMaxEntries || bytes_ + nbytes > kMaxBytes);) {
    if (unused(storages_[i])) {
      bytes_ -= storages_[i].nbytes();
      storages_.erase(storages_.begin() + i);
    } else {
      ++i;
    }
  }
  if (storages_.size() < kMaxEntries && bytes_ + nbytes <= kMaxBytes) {
    storages_.push_back(fresh.storage());
    bytes_ += nbytes;
  }
  return fresh;
}

size_t OutputPool::entries() {
  std::lock_guard<std::mutex> lock(mu_);
  return storages_.size();
}

size_t OutputPool::bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace torch
}  // namespace horovodlite
