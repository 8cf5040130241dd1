// What this machine does with transparent huge pages, for the tests of the
// library's huge-page paths (host_memory.h): probed here, independently of the
// library, so that a wrong answer there cannot make its tests skip.
#pragma once

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

namespace hvl_test {

// The kernel's THP mode (the bracketed word of
// /sys/kernel/mm/transparent_hugepage/enabled); "" without THP.
inline std::string thp_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(f, line);
  const size_t open = line.find('['), close = line.find(']');
  return open == std::string::npos || close == std::string::npos ? "" : line.substr(open + 1, close - open - 1);
}

// "" where this kernel moves private anonymous memory onto a huge page on
// request (madvise MADV_COLLAPSE, Linux 6.1), else why not.
inline std::string collapse_unsupported() {
  constexpr size_t kHuge = size_t{2} << 20;
  void* m = mmap(nullptr, 2 * kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return "mmap failed";
  char* lo = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(m) + kHuge - 1) / kHuge * kHuge);
  std::memset(lo, 1, kHuge);
  const bool ok = madvise(lo, kHuge, 25 /* MADV_COLLAPSE */) == 0;
  const std::string why = ok ? "" : std::string("MADV_COLLAPSE: ") + std::strerror(errno);
  munmap(m, 2 * kHuge);
  return why;
}

}  // namespace hvl_test
