// GoogleTest main for suites that run as several MPI processes. Every rank runs
// every test; rank 0 prints the usual report, the other ranks print only their
// failures (prefixed with the rank). Each process exits non-zero if a test failed
// on it, and mpirun then fails the whole job.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "horovodlite/horovodlite.h"

namespace {

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

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  horovodlite::Status s = horovodlite::init();
  if (!s.ok()) {
    std::fprintf(stderr, "horovodlite::init failed: %s\n", s.to_string().c_str());
    return 2;
  }
  const int rank = horovodlite::rank();
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  int rc = RUN_ALL_TESTS();
  if (horovodlite::is_initialized()) horovodlite::shutdown();
  return rc;
}
