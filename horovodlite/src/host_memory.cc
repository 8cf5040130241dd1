#include "host_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

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

// ---- moving the user's buffers onto huge pages ----

namespace {

#if defined(MADV_COLLAPSE)
constexpr int kMadvCollapse = MADV_COLLAPSE;
#else
constexpr int kMadvCollapse = 25;  // Linux 6.1's value; older C headers lack it
#endif

std::atomic<bool> g_move_inputs{true};

// Whether the kernel's THP mode allows huge pages at all ("never": the
// administrator's word, kept).
bool thp_allowed() {
  static const bool allowed = [] {
    std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
    const std::string mode((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    return !mode.empty() && mode.find("[never]") == std::string::npos;
  }();
  return allowed;
}

// The buffers seen lately, by their whole huge pages [lo, hi).
struct Seen {
  uintptr_t lo, hi;
  enum State : uint8_t { kOnce, kMoved, kRefused } state;
  int64_t retry_after;  // kRefused: sightings left before trying again (-1: never)
  int slow_checks;      // kMoved: checks in a row that had to move pages again
  uint64_t last_use;
};
constexpr size_t kSeenCapacity = 32;
// Sightings before trying again where the kernel had no huge page free.
constexpr int64_t kRetryAfter = 64;
// A check of pages moved already takes well under a microsecond per huge page;
// moving one is a 2 MiB copy. Slower than this, a check moved
// pages again: the buffer was freed and made anew at the same address (a
// custom allocator, HOROVODLITE_KEEP_FREED_MEMORY=0). Twice in a row (once
// can be a buffer freed once, e.g. a tensor made again of another dtype), and
// it is left alone: moving it every op costs more than it saves. Measured in
// this thread's CPU time, which the kernel's copy adds to and a preemption or
// a wait during the call does not: in wall time, ranks that share cores made
// a check of moved pages look slow, often enough for a test run to give up on
// a buffer this way.
constexpr double kSlowCheckPerPage = 100e-6;  // seconds of CPU
constexpr int kSlowChecksToGiveUp = 2;
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
std::mutex g_seen_mu;
std::vector<Seen>& seen_buffers() {
  static auto* seen = new std::vector<Seen>();
  return *seen;
}
uint64_t g_seen_clock = 0;

}  // namespace

void set_huge_page_inputs(bool on) { g_move_inputs = on; }

ByteRange huge_pages_for_sending(const void* p, size_t bytes) {
  const char* begin = static_cast<const char*>(p);
  if (p == nullptr || bytes == 0) return {};
  if (on_huge_pages(p, bytes)) return {begin, begin + bytes};
  if (bytes < kMoveToHugePagesMinBytes || !g_move_inputs.load(std::memory_order_relaxed) || !thp_allowed()) return {};
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t lo = (a + HostBuffer::kHugePage - 1) / HostBuffer::kHugePage * HostBuffer::kHugePage;
  const uintptr_t hi = (a + bytes) / HostBuffer::kHugePage * HostBuffer::kHugePage;
  if (hi <= lo) return {};
  std::lock_guard<std::mutex> lock(g_seen_mu);
  std::vector<Seen>& seen = seen_buffers();
  ++g_seen_clock;
  Seen* s = nullptr;
  for (Seen& e : seen) {
    if (e.lo == lo && e.hi == hi) s = &e;
  }
  if (s == nullptr) {  // first sight: remembered, left as it is
    const Seen fresh{lo, hi, Seen::kOnce, 0, 0, g_seen_clock};
    if (seen.size() < kSeenCapacity) {
      seen.push_back(fresh);
    } else {
      *std::min_element(seen.begin(), seen.end(),
                        [](const Seen& x, const Seen& y) { return x.last_use < y.last_use; }) = fresh;
    }
    return {};
  }
  s->last_use = g_seen_clock;
  if (s->state == Seen::kRefused && (s->retry_after < 0 || --s->retry_after > 0)) return {};
  const double t0 = thread_cpu_seconds();
  const int rc = madvise(reinterpret_cast<void*>(lo), hi - lo, kMadvCollapse);
  const int err = errno;
  const double took = thread_cpu_seconds() - t0;
  if (rc != 0) {
    // EAGAIN / ENOMEM: no huge page free now; anything else (EINVAL: a kernel
    // without MADV_COLLAPSE, a file-backed or shared mapping, THP off for the
    // process): not tried again.
    s->state = Seen::kRefused;
    s->retry_after = (err == EAGAIN || err == ENOMEM) ? kRetryAfter : -1;
    return {};
  }
  if (s->state == Seen::kMoved) {
    const double pages = static_cast<double>((hi - lo) / HostBuffer::kHugePage);
    s->slow_checks = took > kSlowCheckPerPage * pages ? s->slow_checks + 1 : 0;
    if (s->slow_checks >= kSlowChecksToGiveUp) {
      s->state = Seen::kRefused;
      s->retry_after = -1;
      return {};
    }
  }
  s->state = Seen::kMoved;
  return {reinterpret_cast<const char*>(lo), reinterpret_cast<const char*>(hi)};
}

}  // namespace horovodlite
