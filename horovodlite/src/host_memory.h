// Host memory: the C library allocator's policy for freed memory
// (Config::keep_freed_memory), and HostBuffer, the library's own buffers that
// other processes copy out of.
//
// Freed memory. glibc's malloc returns freed memory to the kernel: blocks of
// at least its mmap threshold (at most 32 MiB) are unmapped when freed, and the
// heap's free top is trimmed beyond the trim threshold. A training step frees its
// activations and allocates them again in the next step, so each comes back as
// fresh pages, faulted in and zeroed one by one: for a CNN trained on the CPU a
// large part of each step, and how much depended on where the heap's live
// blocks happened to lie (docs/performance.md). Kept, the memory is reused in
// place: no mmap for large blocks (M_MMAP_MAX 0) and no trimming
// (M_TRIM_THRESHOLD unlimited), for the life of the process. The cost is the
// high-water mark: freed memory stays with the process (a higher peak RSS).
#pragma once

#include <cstddef>

#include "horovodlite/config.h"

namespace horovodlite {

enum class FreedMemory : uint8_t {
  kKept,         // the policy above was applied
  kLeft,         // KEEP_FREED_MEMORY=0: malloc left as it is
  kUserTuned,    // the user's own malloc settings (GLIBC_TUNABLES glibc.malloc.*, MALLOC_*_): left as they are
  kUnsupported,  // not glibc's malloc
};

// Applies the policy when `keep` and the environment has no malloc settings of
// the user's; says what it did. Idempotent.
FreedMemory keep_freed_memory(bool keep);
const char* freed_memory_name(FreedMemory f);

// A buffer that ranks on this host copy out of: Open MPI's single copy (CMA)
// and the Gloo transport's shared-memory path read the sender's pages with
// process_vm_readv, which pins them one page at a time. With 4 KiB pages the
// pinning costs about as much as the copy (docs/results/2026-11-performance.md,
// "Huge pages"). So a buffer of kHugePage bytes or more is
// mapped on its own, kHugePage aligned, and advised onto transparent huge
// pages (madvise MADV_HUGEPAGE) before anything touches it: the kernel uses
// them where its THP mode is "madvise" or "always" and it has free 2 MiB
// pages, 4 KiB pages otherwise. Smaller buffers are mapped page aligned. The
// contents start as zeros.
class HostBuffer {
 public:
  static constexpr size_t kHugePage = size_t{2} << 20;

  HostBuffer() = default;
  // At least `bytes` (rounded up to the alignment); empty (data() == nullptr)
  // when bytes is 0 or the memory could not be mapped.
  explicit HostBuffer(size_t bytes);
  ~HostBuffer();
  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  char* data() const { return data_; }
  size_t size() const { return size_; }
  // Whether the kernel took the advice to use huge pages (it may still fall
  // back to 4 KiB pages where it has no free 2 MiB ones).
  bool huge_pages_advised() const { return advised_; }

 private:
  void release();

  char* data_ = nullptr;
  size_t size_ = 0;
  bool advised_ = false;
};

// Whether [p, p + bytes) lies inside one live HostBuffer that was advised onto
// huge pages. Adasum sends such memory as it is and copies any other into a
// HostBuffer first (ops/adasum_exchange.h).
bool on_huge_pages(const void* p, size_t bytes);

// [lo, hi): bytes of this process's memory; empty where lo == hi.
struct ByteRange {
  const char* lo = nullptr;
  const char* hi = nullptr;
  bool contains(const void* p, size_t bytes) const {
    const char* b = static_cast<const char*>(p);
    return lo != hi && b >= lo && b + bytes <= hi;
  }
};

// The user's memory that peers copy out of. A host collective sends a single
// tensor from the user's own buffers (its input, and its output after the
// first step), and the peers on this host copy out of their pages, pinning
// them one at a time: on 4 KiB pages as costly as the copy (see HostBuffer).
// So from the second op that sends the same buffer on (same address and
// length; one-off buffers are not worth it), the whole 2 MiB pages inside it
// are moved onto transparent huge pages where they lie (madvise MADV_COLLAPSE,
// Linux 6.1 and later: the kernel copies each 2 MiB into a huge page mapped at
// the same address; contents and addresses do not change, the user sees
// nothing). The move costs one copy of the buffer, once; each later op only
// checks (the kernel finds the pages moved: microseconds). Off with
// HUGE_PAGE_INPUTS=0 (Config::huge_page_inputs), where the kernel's THP mode is
// "never", and for buffers the kernel will not move (file-backed or shared
// mappings: tried once per buffer; a kernel short of free huge pages: tried
// again later), nor for a buffer that comes back on fresh 4 KiB pages at every
// op (freed and allocated anew at the same address: left alone after two checks
// in a row that had to move it again). Returns what of [p, p + bytes) lies on
// huge pages for the op in progress: all of it inside a HostBuffer; the whole
// 2 MiB pages inside it where MADV_COLLAPSE just returned 0 (moved now or
// before); otherwise nothing. Thread-safe.
ByteRange huge_pages_for_sending(const void* p, size_t bytes);
// Buffers smaller than this are left alone (under two whole huge pages).
constexpr size_t kMoveToHugePagesMinBytes = size_t{4} << 20;
// HUGE_PAGE_INPUTS, applied at init (default on).
void set_huge_page_inputs(bool on);

}  // namespace horovodlite
