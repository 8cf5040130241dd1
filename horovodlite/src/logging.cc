#include "logging.h"

#include <atomic>
#include <cstdio>

namespace horovodlite {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kWarning)};
std::atomic<int> g_rank{-1};
}  // namespace

void set_log_level(LogLevel level) { g_level = static_cast<int>(level); }
void set_log_rank(int rank) { g_rank = rank; }
bool log_enabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(std::memory_order_relaxed); }

void log_write(LogLevel level, const std::string& message) {
  // One fprintf per line so that lines from different threads do not interleave.
  std::fprintf(stderr, "[horovodlite %s rank %d] %s\n", log_level_name(level), g_rank.load(), message.c_str());
}

}  // namespace horovodlite
