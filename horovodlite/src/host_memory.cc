#include "host_memory.h"

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace horovodlite {

namespace {

// glibc's malloc parameters that a user may have set at start-up: each as its
// environment variable and as its tunable (GLIBC_TUNABLES).
constexpr struct {
  const char* env;
  const char* tunable;
} kMallocSettings[] = {
    {"MALLOC_MMAP_MAX_", "glibc.malloc.mmap_max"},
    {"MALLOC_MMAP_THRESHOLD_", "glibc.malloc.mmap_threshold"},
    {"MALLOC_TRIM_THRESHOLD_", "glibc.malloc.trim_threshold"},
    {"MALLOC_TOP_PAD_", "glibc.malloc.top_pad"},
};

bool user_tuned_malloc() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  for (const auto& s : kMallocSettings) {
    if (std::getenv(s.env) != nullptr || (tunables != nullptr && std::strstr(tunables, s.tunable) != nullptr)) {
      return true;
    }
  }
  return false;
}

}  // namespace

FreedMemory keep_freed_memory(bool keep) {
  if (!keep) return FreedMemory::kLeft;
  if (user_tuned_malloc()) return FreedMemory::kUserTuned;
#if defined(__GLIBC__)
  // -1: no trim threshold at all (the value is read as a size_t).
  if (mallopt(M_MMAP_MAX, 0) == 1 && mallopt(M_TRIM_THRESHOLD, -1) == 1) return FreedMemory::kKept;
#endif
  return FreedMemory::kUnsupported;
}

const char* freed_memory_name(FreedMemory f) {
  switch (f) {
    case FreedMemory::kKept:
      return "kept for reuse (glibc malloc: M_MMAP_MAX 0, no trimming)";
    case FreedMemory::kLeft:
      return "returned to the system as malloc decides (HOROVODLITE_KEEP_FREED_MEMORY=0)";
    case FreedMemory::kUserTuned:
      return "as the user's malloc settings say (GLIBC_TUNABLES glibc.malloc.* or MALLOC_*_ set)";
    case FreedMemory::kUnsupported:
      return "as the C library decides (not glibc's malloc)";
  }
  return "?";
}

}  // namespace horovodlite
