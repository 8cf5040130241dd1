// host_memory.h: the freed-memory policy, each case in a child process of its
// own (a death test's fork), since it changes the process's malloc for good;
// and HostBuffer (with the fusion buffer built on it), in this process.
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "host_memory.h"
#include "huge_page_probe.h"
#include "ops/fusion.h"

namespace hvl = horovodlite;

namespace {

constexpr size_t kBlock = size_t{48} << 20;  // above glibc's largest mmap threshold (32 MiB)

// Whether a block of kBlock bytes is mapped on its own (malloc's mmap path),
// and the heap's size once it has been freed. Exits 0 when they are as the
// policy `kept` says, else prints what differs and exits 1.
[[noreturn]] void check_blocks(bool kept) {
  const size_t mapped_before = mallinfo2().hblks;
  auto* p = static_cast<char*>(std::malloc(kBlock));
  if (p == nullptr) std::_Exit(2);
  std::memset(p, 1, kBlock);
  const bool mapped = mallinfo2().hblks > mapped_before;
  std::free(p);
  const size_t heap_after_free = mallinfo2().arena;
  if (mapped == kept) {
    std::fprintf(stderr, "a %zu-byte block was %s\n", kBlock, mapped ? "mmapped" : "taken from the heap");
    std::_Exit(1);
  }
  if (kept && heap_after_free < kBlock) {
    std::fprintf(stderr, "the heap shrank to %zu bytes when the block was freed\n", heap_after_free);
    std::_Exit(1);
  }
  std::_Exit(0);
}

}  // namespace

TEST(FreedMemory, KeptLargeBlocksComeFromTheHeapAndStayThere) {
  EXPECT_EXIT(
      {
        unsetenv("GLIBC_TUNABLES");
        for (const char* v :
             {"MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_"})
          unsetenv(v);
        if (hvl::keep_freed_memory(true) != hvl::FreedMemory::kKept) std::_Exit(3);
        check_blocks(true);
      },
      testing::ExitedWithCode(0), "");
}

TEST(FreedMemory, OffLeavesMallocAsItIs) {
  EXPECT_EXIT(
      {
        if (hvl::keep_freed_memory(false) != hvl::FreedMemory::kLeft) std::_Exit(3);
        check_blocks(false);
      },
      testing::ExitedWithCode(0), "");
}

TEST(FreedMemory, TheUsersOwnMallocSettingsWin) {
  EXPECT_EXIT(
      {
        setenv("MALLOC_TRIM_THRESHOLD_", "131072", 1);
        if (hvl::keep_freed_memory(true) != hvl::FreedMemory::kUserTuned) std::_Exit(3);
        check_blocks(false);
      },
      testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        unsetenv("MALLOC_TRIM_THRESHOLD_");
        setenv("GLIBC_TUNABLES", "glibc.pthread.rseq=0:glibc.malloc.mmap_threshold=65536", 1);
        if (hvl::keep_freed_memory(true) != hvl::FreedMemory::kUserTuned) std::_Exit(3);
        check_blocks(false);
      },
      testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        // Tunables of other parts of glibc are not malloc settings.
        setenv("GLIBC_TUNABLES", "glibc.pthread.rseq=0", 1);
        if (hvl::keep_freed_memory(true) != hvl::FreedMemory::kKept) std::_Exit(3);
        check_blocks(true);
      },
      testing::ExitedWithCode(0), "");
}

// ---- HostBuffer ----

namespace {

constexpr size_t kHuge = hvl::HostBuffer::kHugePage;

using hvl_test::thp_mode;

// A field of the mapping that holds `p`, from /proc/self/smaps ("" if absent).
std::string smaps_field(const void* p, const std::string& field) {
  std::ifstream f("/proc/self/smaps");
  std::string line;
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  bool in = false;
  while (std::getline(f, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2) {
      in = at >= lo && at < hi;
    } else if (in && line.rfind(field + ":", 0) == 0) {
      return line.substr(field.size() + 1);
    }
  }
  return "";
}

// The process's mapped address space, in KiB (VmSize in /proc/self/status).
long vm_size_kib() {
  std::ifstream f("/proc/self/status");
  std::string key;
  long kib = -1;
  while (f >> key) {
    if (key == "VmSize:" && (f >> kib)) return kib;
  }
  return -1;
}

bool is_mapped(const void* p, size_t n) { return msync(const_cast<void*>(p), n, MS_ASYNC) == 0; }

}  // namespace

TEST(HostBuffer, LargeBuffersStartOnA2MiBBoundaryAdvisedOntoHugePages) {
  if (thp_mode().empty()) GTEST_SKIP() << "this kernel has no transparent huge pages";
  const long before = vm_size_kib();
  hvl::HostBuffer b((size_t{5} << 20) + 3);
  ASSERT_NE(b.data(), nullptr);
  // Only the buffer stays mapped: the slack mapped to find the 2 MiB boundary
  // was given back.
  EXPECT_EQ(vm_size_kib() - before, static_cast<long>(b.size() >> 10));
  EXPECT_EQ(b.size(), size_t{6} << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kHuge, 0u);
  EXPECT_EQ(b.data()[0], 0);
  EXPECT_TRUE(b.huge_pages_advised());
  // The whole buffer is one mapping with the advice (VmFlags "hg").
  EXPECT_NE((" " + smaps_field(b.data(), "VmFlags") + " ").find(" hg "), std::string::npos)
      << "VmFlags:" << smaps_field(b.data(), "VmFlags");
  EXPECT_EQ(smaps_field(b.data(), "Size"), smaps_field(b.data() + b.size() - 1, "Size"));
  EXPECT_EQ(std::stoul(smaps_field(b.data(), "Size")), b.size() >> 10) << "the mapping holds more than the buffer";
  if (thp_mode() != "never") {
    EXPECT_EQ(std::stoi(smaps_field(b.data(), "THPeligible")), 1);
  }
  std::memset(b.data(), 7, b.size());
  EXPECT_EQ(b.data()[b.size() - 1], 7);
}

TEST(HostBuffer, SmallBuffersArePageAlignedAndNotAdvised) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  hvl::HostBuffer b(100);
  ASSERT_NE(b.data(), nullptr);
  EXPECT_EQ(b.size(), page);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % page, 0u);
  EXPECT_FALSE(b.huge_pages_advised());
  EXPECT_EQ(b.data()[99], 0);
  EXPECT_EQ(hvl::HostBuffer(0).data(), nullptr);
}

TEST(HostBuffer, MovingHandsTheMappingOverAndTheLastOwnerUnmapsIt) {
  hvl::HostBuffer a(size_t{3} << 20);
  char* p = a.data();
  const size_t n = a.size();
  ASSERT_NE(p, nullptr);
  hvl::HostBuffer b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.data(), p);
  hvl::HostBuffer c;
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_TRUE(is_mapped(p, n));
  c = hvl::HostBuffer();
  EXPECT_EQ(c.data(), nullptr);
  EXPECT_FALSE(is_mapped(p, n));
}

TEST(HostBuffer, OnHugePagesKnowsTheLiveAdvisedBuffersAndNothingElse) {
  if (thp_mode().empty()) GTEST_SKIP() << "this kernel has no transparent huge pages";
  hvl::HostBuffer a(size_t{4} << 20), small(100);
  ASSERT_TRUE(a.huge_pages_advised());
  const char* p = a.data();
  EXPECT_TRUE(hvl::on_huge_pages(p, a.size()));
  EXPECT_TRUE(hvl::on_huge_pages(p + 4096, 256 << 10));
  EXPECT_TRUE(hvl::on_huge_pages(p + a.size() - 1, 1));
  EXPECT_FALSE(hvl::on_huge_pages(p, a.size() + 1)) << "runs past the end";
  EXPECT_FALSE(hvl::on_huge_pages(p - 1, 2)) << "starts before it";
  EXPECT_FALSE(hvl::on_huge_pages(small.data(), 10)) << "not advised";
  std::vector<char> heap(size_t{4} << 20);
  EXPECT_FALSE(hvl::on_huge_pages(heap.data(), heap.size()));
  // Moved: still the same mapping; released: forgotten.
  hvl::HostBuffer b(std::move(a));
  EXPECT_TRUE(hvl::on_huge_pages(p, b.size()));
  b = hvl::HostBuffer();
  EXPECT_FALSE(hvl::on_huge_pages(p, 1));
}

TEST(FusionBuffer, GrowsOntoHugePagesAndKeepsItsBufferForSmallerRequests) {
  hvl::FusionBuffer f;
  ASSERT_NE(f.get(100), nullptr);
  EXPECT_GE(f.capacity(), 100u);
  void* big = f.get(size_t{3} << 20);
  ASSERT_NE(big, nullptr);
  EXPECT_GE(f.capacity(), size_t{3} << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big) % kHuge, 0u);
  EXPECT_EQ(f.get(size_t{1} << 20), big);
  EXPECT_EQ(f.get(f.capacity()), big);
}

// ---- huge_pages_for_sending: the user's buffers moved onto huge pages ----

namespace {

// A user's buffer as malloc or PyTorch hands it out: a private anonymous
// mapping of its own without huge-page advice (on 4 KiB pages where the THP
// mode is "madvise", which the tests below need), the buffer starting
// `offset` bytes in, so that its ends are not on 2 MiB boundaries. Each test
// uses its own length: the library remembers buffers by address and length.
struct UserBuffer {
  char* map = nullptr;
  size_t map_bytes = 0;
  char* data = nullptr;
  size_t bytes = 0;
  UserBuffer(size_t n, size_t offset) : map_bytes(n + offset + kHuge), bytes(n) {
    map = static_cast<char*>(mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (map == MAP_FAILED) map = nullptr;
    if (map != nullptr) {
      data = map + offset;
      fill();
    }
  }
  ~UserBuffer() {
    if (map != nullptr) munmap(map, map_bytes);
  }
  // Freed and made anew at the same address, on fresh 4 KiB pages.
  void remake() {
    void* again = mmap(map, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    ASSERT_EQ(again, static_cast<void*>(map));
    fill();
  }
  void fill() {
    for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<char>(i * 131 + (i >> 20));
  }
  bool intact() const {
    for (size_t i = 0; i < bytes; ++i) {
      if (data[i] != static_cast<char>(i * 131 + (i >> 20))) return false;
    }
    return true;
  }
  // Bytes of its mapping on huge pages (AnonHugePages in /proc/self/smaps).
  size_t huge_bytes() const {
    const std::string kb = smaps_field(map, "AnonHugePages");
    return kb.empty() ? 0 : std::stoul(kb) << 10;
  }
};

// "" where the tests below can run: the THP mode is "madvise" (a user's
// buffer starts on 4 KiB pages, and the library moves it) and this kernel
// moves memory onto huge pages on request; else why not.
std::string moving_unsupported() {
  if (thp_mode().empty() || thp_mode() == "never") return "transparent huge pages are off";
  if (thp_mode() != "madvise") return "THP mode '" + thp_mode() + "': a user's buffer may start on huge pages";
  return hvl_test::collapse_unsupported();
}

}  // namespace

TEST(HugePagesForSending, TheSecondSightMovesTheWhole2MiBPagesInsideAndKeepsTheContents) {
  const std::string why = moving_unsupported();
  if (!why.empty()) GTEST_SKIP() << why;
  hvl::set_huge_page_inputs(true);
  UserBuffer u((size_t{9} << 20) + 12345, 4096 + 100);
  ASSERT_NE(u.map, nullptr);
  ASSERT_EQ(u.huge_bytes(), 0u) << "the buffer starts on 4 KiB pages";
  // First sight: left as it is.
  hvl::ByteRange r = hvl::huge_pages_for_sending(u.data, u.bytes);
  EXPECT_EQ(r.lo, r.hi);
  EXPECT_FALSE(r.contains(u.data + kHuge, 1));
  EXPECT_EQ(u.huge_bytes(), 0u);
  // Second: the whole 2 MiB pages inside it, and only those, are moved.
  r = hvl::huge_pages_for_sending(u.data, u.bytes);
  const uintptr_t a = reinterpret_cast<uintptr_t>(u.data);
  const uintptr_t lo = (a + kHuge - 1) / kHuge * kHuge, hi = (a + u.bytes) / kHuge * kHuge;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r.lo), lo);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r.hi), hi);
  EXPECT_GE(hi - lo, size_t{6} << 20) << "9 MiB hold at least three whole 2 MiB pages";
  EXPECT_EQ(u.huge_bytes(), hi - lo);
  EXPECT_TRUE(u.intact()) << "moving changed the contents";
  EXPECT_TRUE(r.contains(reinterpret_cast<char*>(lo), hi - lo));
  EXPECT_FALSE(r.contains(u.data, 1)) << "the head is on 4 KiB pages";
  EXPECT_FALSE(r.contains(reinterpret_cast<char*>(hi), 1)) << "so is the tail";
  // Later ops find it moved.
  const hvl::ByteRange again = hvl::huge_pages_for_sending(u.data, u.bytes);
  EXPECT_EQ(again.lo, r.lo);
  EXPECT_EQ(again.hi, r.hi);
  EXPECT_TRUE(u.intact());
}

TEST(HugePagesForSending, SmallOffOrLibraryBuffers) {
  const std::string why = moving_unsupported();
  if (!why.empty()) GTEST_SKIP() << why;
  hvl::set_huge_page_inputs(true);
  // Under kMoveToHugePagesMinBytes: never moved.
  UserBuffer small(hvl::kMoveToHugePagesMinBytes - 1, 0);
  for (int i = 0; i < 3; ++i) {
    const hvl::ByteRange r = hvl::huge_pages_for_sending(small.data, small.bytes);
    EXPECT_EQ(r.lo, r.hi);
  }
  EXPECT_EQ(small.huge_bytes(), 0u);
  // HUGE_PAGE_INPUTS=0: never moved.
  hvl::set_huge_page_inputs(false);
  UserBuffer off((size_t{6} << 20) + 7, 0);
  for (int i = 0; i < 3; ++i) {
    const hvl::ByteRange r = hvl::huge_pages_for_sending(off.data, off.bytes);
    EXPECT_EQ(r.lo, r.hi);
  }
  EXPECT_EQ(off.huge_bytes(), 0u);
  // The library's own HostBuffers: all of it, at once, either way.
  hvl::HostBuffer b(size_t{4} << 20);
  const hvl::ByteRange whole = hvl::huge_pages_for_sending(b.data() + 10, b.size() - 20);
  EXPECT_EQ(whole.lo, b.data() + 10);
  EXPECT_EQ(whole.hi, b.data() + b.size() - 10);
  hvl::set_huge_page_inputs(true);
}

TEST(HugePagesForSending, ABufferMadeAnewEveryOpIsLeftAloneAfterTwo) {
  const std::string why = moving_unsupported();
  if (!why.empty()) GTEST_SKIP() << why;
  hvl::set_huge_page_inputs(true);
  UserBuffer u((size_t{11} << 20) + 5, 64);
  ASSERT_NE(u.map, nullptr);
  hvl::huge_pages_for_sending(u.data, u.bytes);
  hvl::ByteRange r = hvl::huge_pages_for_sending(u.data, u.bytes);
  ASSERT_NE(r.lo, r.hi) << "moved at the second sight";
  // Freed and made anew at the same address (4 KiB pages again): each check
  // has to move it again; after the second such check it is left alone.
  u.remake();
  r = hvl::huge_pages_for_sending(u.data, u.bytes);
  EXPECT_NE(r.lo, r.hi) << "moved again: one slow check may be a buffer freed once";
  EXPECT_TRUE(u.intact());
  u.remake();
  r = hvl::huge_pages_for_sending(u.data, u.bytes);
  EXPECT_EQ(r.lo, r.hi) << "the second slow check in a row gives up";
  u.remake();
  r = hvl::huge_pages_for_sending(u.data, u.bytes);
  EXPECT_EQ(r.lo, r.hi);
  EXPECT_EQ(u.huge_bytes(), 0u) << "not moved any more";
  EXPECT_TRUE(u.intact());
}
