#include "host_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

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

namespace {

// The live HostBuffers advised onto huge pages: start -> end. Never destroyed
// (a buffer may be released after static destructors have run).
std::mutex g_advised_mu;
std::map<uintptr_t, uintptr_t>& advised_ranges() {
  static auto* ranges = new std::map<uintptr_t, uintptr_t>();
  return *ranges;
}

}  // namespace

bool on_huge_pages(const void* p, size_t bytes) {
  const auto begin = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(g_advised_mu);
  const auto& ranges = advised_ranges();
  auto it = ranges.upper_bound(begin);
  if (it == ranges.begin()) return false;
  --it;
  return begin >= it->first && begin + bytes <= it->second;
}

HostBuffer::HostBuffer(size_t bytes) {
  if (bytes == 0) return;
  const bool huge = bytes >= kHugePage;
  const size_t align = huge ? kHugePage : static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t len = (bytes + align - 1) / align * align;
  // Mapped with room to start on a 2 MiB boundary; the rest is given back.
  const size_t mapped = huge ? len + kHugePage : len;
  void* raw = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return;
  char* start = static_cast<char*>(raw);
  char* p = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(start) + align - 1) / align * align);
  if (p > start) munmap(start, static_cast<size_t>(p - start));
  if (start + mapped > p + len) munmap(p + len, static_cast<size_t>(start + mapped - (p + len)));
  data_ = p;
  size_ = len;
#if defined(MADV_HUGEPAGE)
  if (huge) advised_ = madvise(p, len, MADV_HUGEPAGE) == 0;
#endif
  if (advised_) {
    std::lock_guard<std::mutex> lock(g_advised_mu);
    advised_ranges()[reinterpret_cast<uintptr_t>(p)] = reinterpret_cast<uintptr_t>(p) + len;
  }
}

HostBuffer::~HostBuffer() { release(); }

HostBuffer::HostBuffer(HostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      advised_(std::exchange(other.advised_, false)) {}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    advised_ = std::exchange(other.advised_, false);
  }
  return *this;
}

void HostBuffer::release() {
  if (advised_) {
    std::lock_guard<std::mutex> lock(g_advised_mu);
    advised_ranges().erase(reinterpret_cast<uintptr_t>(data_));
  }
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
  advised_ = false;
}

}  // namespace horovodlite
