// Output of GoogleTest suites that run as several MPI processes: rank 0 keeps
// the usual report, every other rank prints only its failures, prefixed with
// the rank. Used by the test mains (with and without the horovodlite runtime).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>

namespace hvl_test {

class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed()) {
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
    }
  }

 private:
  int rank_;
};

// Call after InitGoogleTest, before RUN_ALL_TESTS.
inline void report_from_rank(int rank) {
  if (rank == 0) return;
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new FailurePrinter(rank));
}

}  // namespace hvl_test
