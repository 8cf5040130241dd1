// Minimal leveled logging to stderr, prefixed with the rank.
#pragma once

#include <sstream>

#include "horovodlite/config.h"

namespace horovodlite {

void set_log_level(LogLevel level);
void set_log_rank(int rank);
bool log_enabled(LogLevel level);
void log_write(LogLevel level, const std::string& message);

}  // namespace horovodlite

#define HVL_LOG(level, expr)                                                       \
  do {                                                                             \
    if (::horovodlite::log_enabled(::horovodlite::LogLevel::level)) {              \
      std::ostringstream hvl_log_os_;                                              \
      hvl_log_os_ << expr;                                                         \
      ::horovodlite::log_write(::horovodlite::LogLevel::level, hvl_log_os_.str()); \
    }                                                                              \
  } while (0)
