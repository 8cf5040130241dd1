// Invariant checks that say what broke (after Gloo's GLOO_ENFORCE_EQ): when the
// condition does not hold, the enclosing function returns a kInternal Status
// whose message holds the file, the line, the condition and both values, and
// any further arguments streamed after them:
//
//   HVL_ENFORCE_EQ(r.tensor_sizes.size(), n * size, "fused allgather of '", r.names[0], "'");
//   -> "ops/mpi_allgather.cc:35: invariant r.tensor_sizes.size() == n * size failed (5 vs. 6):
//       fused allgather of 'x'"
//
// For functions that return a Status (the core's errors are values; see
// HVL_RETURN_IF_ERROR). A broken invariant is a bug in horovodlite, never bad input:
// bad input gets its own message from the argument checks (api.cc).
#pragma once

#include <sstream>
#include <string>

#include "horovodlite/common.h"

namespace horovodlite::detail {

template <typename A, typename B, typename... More>
Status enforce_failed(const char* file, int line, const char* condition, const A& a, const B& b, const More&... more) {
  std::ostringstream os;
  const std::string path(file);
  const size_t src = path.rfind("/src/");
  os << (src == std::string::npos ? path : path.substr(src + 5)) << ":" << line << ": invariant " << condition
     << " failed (" << a << " vs. " << b << ")";
  if constexpr (sizeof...(more) > 0) {
    os << ": ";
    (os << ... << more);
  }
  return Status::Internal(os.str());
}

}  // namespace horovodlite::detail

// The optional further arguments are streamed after the values:
// HVL_ENFORCE_EQ(a, b) or HVL_ENFORCE_EQ(a, b, "context ", name).
#define HVL_ENFORCE_EQ(a, b, ...) HVL_ENFORCE_OP_(==, a, b __VA_OPT__(, ) __VA_ARGS__)
#define HVL_ENFORCE_LE(a, b, ...) HVL_ENFORCE_OP_(<=, a, b __VA_OPT__(, ) __VA_ARGS__)

#define HVL_ENFORCE_OP_(op, a, b, ...)                                                                    \
  do {                                                                                                    \
    const auto& hvl_enforce_a_ = (a);                                                                     \
    const auto& hvl_enforce_b_ = (b);                                                                     \
    if (!(hvl_enforce_a_ op hvl_enforce_b_))                                                              \
      return ::horovodlite::detail::enforce_failed(__FILE__, __LINE__, #a " " #op " " #b, hvl_enforce_a_, \
                                                   hvl_enforce_b_ __VA_OPT__(, ) __VA_ARGS__);            \
  } while (0)
