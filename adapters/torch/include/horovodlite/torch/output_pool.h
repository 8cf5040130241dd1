// A small, bounded pool of CPU output storages for out-of-place collectives.
//
// hvd.allreduce(t) returns a new tensor on every call. Allocated fresh, a large
// output is mapped and page-faulted in on every call (glibc serves large blocks
// with mmap, and LibTorch's CPU allocator does not cache), which costs more than
// the collective itself at tens of MiB. The pool keeps the storages of recent
// outputs and hands one out again once nothing but the pool references it
// (the caller has dropped every tensor and view on it). Each call gets a fresh
// TensorImpl on the storage, so no autograd metadata, version counter or
// aliasing carries over from one result to the next. Storages of 2 MiB or more
// are the adapter's own, on transparent huge pages (HostBuffer, the core's
// host_memory.h): the peers' single copies of the result, the allgather's
// sends, pin them far faster than 4 KiB pages.
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <mutex>
#include <vector>

namespace horovodlite {
namespace torch {

class OutputPool {
 public:
  // Bounds: storages below kMinBytes are left to the allocator (cheap to get
  // fresh); the pool holds at most kMaxEntries storages and kMaxBytes in all.
  static constexpr size_t kMinBytes = 64 << 10;
  static constexpr size_t kMaxEntries = 8;
  static constexpr size_t kMaxBytes = 512u << 20;

  // The process-wide pool of the adapter's out-of-place collectives.
  static OutputPool& global();

  // A contiguous tensor shaped and typed like `like` (CPU, any dtype), on a
  // pooled storage that nothing else references, or on a new one (pooled if the
  // bounds allow). Not zeroed.
  at::Tensor take(const at::Tensor& like);

  // For tests: storages held and their bytes.
  size_t entries();
  size_t bytes();

 private:
  std::mutex mu_;
  std::vector<c10::Storage> storages_;  // least recently handed out first
  size_t bytes_ = 0;
};

}  // namespace torch
}  // namespace horovodlite
