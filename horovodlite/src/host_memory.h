// The C library allocator's policy for freed host memory (Config::keep_freed_memory).
//
// glibc's malloc returns freed memory to the kernel: blocks of at least its
// mmap threshold (at most 32 MiB) are unmapped when freed, and the heap's free
// top is trimmed beyond the trim threshold. A training step frees its
// activations and allocates them again in the next step, so each comes back as
// fresh pages, faulted in and zeroed one by one: ResNet-50 at batch 16 on the
// CPU took 0.4-0.8 million minor faults per step and rank (1.5-3.2 GB), about a
// third of its time, and how many depended on where the heap's live blocks
// happened to lie (docs/performance.md). Kept, the memory is reused in place:
// no mmap for large blocks (M_MMAP_MAX 0) and no trimming (M_TRIM_THRESHOLD
// unlimited), for the life of the process. The cost is the high-water mark:
// freed memory stays with the process (ResNet-50: peak RSS 6-13 % higher).
#pragma once

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

}  // namespace horovodlite
