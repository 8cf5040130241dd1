// A rank of the multi-host failure tests (failure_test.sh): allreduces a 4 MiB
// tensor (the hierarchical algorithm on 2x2) and a 4 KiB one over and over until
// the job fails. Prints "ready" once the first round has completed everywhere,
// and exits non-zero with horovodlite's message when an allreduce fails (the
// watchdog's MPI_Abort may end it before that).
#include <cstdio>
#include <vector>

#include "horovodlite/horovodlite.h"

namespace hvl = horovodlite;

int main() {
  hvl::Status s = hvl::init();
  if (!s.ok()) {
    std::fprintf(stderr, "failure_worker: init failed: %s\n", s.message().c_str());
    return 2;
  }
  std::vector<float> big(1 << 20, 1.0f), small(1024, 1.0f);
  for (long round = 0;; ++round) {
    for (auto* v : {&big, &small}) {
      hvl::TensorView t{v->data(), hvl::DataType::kFloat32, {static_cast<int64_t>(v->size())}};
      s = hvl::allreduce_async(v == &big ? "big" : "small", t, t)->wait();
      if (!s.ok()) {
        std::fprintf(stderr, "failure_worker: rank %d: allreduce failed in round %ld: %s\n", hvl::rank(), round,
                     s.message().c_str());
        return 1;
      }
    }
    if (round == 0) {
      std::printf("failure_worker: rank %d ready\n", hvl::rank());
      std::fflush(stdout);
    }
  }
}
