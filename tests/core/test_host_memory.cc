// The freed-memory policy (host_memory.h), each case in a child process of its
// own (a death test's fork), since it changes the process's malloc for good.
#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdlib>
#include <cstring>

#include "host_memory.h"

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
