// Configuration, read from the environment once at init and validated there.
// Every variable is HOROVODLITE_<NAME>; HOROVOD_<NAME> is accepted as an alias
// (HOROVODLITE_ wins when both are set).
#pragma once

#include <cstdint>
#include <string>

#include "horovodlite/common.h"

namespace horovodlite {

enum class LogLevel : uint8_t { kTrace = 0, kDebug = 1, kInfo = 2, kWarning = 3, kError = 4, kFatal = 5 };

struct Config {
  // FUSION_THRESHOLD (bytes): the largest fused allreduce batch; 0 disables fusion.
  int64_t fusion_threshold_bytes = 128ll * 1024 * 1024;
  // CYCLE_TIME (milliseconds, fractional allowed): the longest the background
  // thread waits before a negotiation cycle; it wakes at once on new work.
  double cycle_time_ms = 1.0;
  // CACHE_CAPACITY (entries): response cache size; 0 disables the cache.
  int64_t cache_capacity = 1024;
  // LOG_LEVEL: trace, debug, info, warning, error, fatal.
  LogLevel log_level = LogLevel::kWarning;

  // Reads the environment; returns InvalidArgument naming the variable and value
  // on anything malformed or out of range.
  static Status from_env(Config* out);
};

const char* log_level_name(LogLevel level);

}  // namespace horovodlite
