// A training-like loop in which one rank fails in a chosen way after a few steps;
// the others keep stepping until an op fails (then they print the error and exit 3)
// or mpirun ends them. run_failure.sh checks that the job ends, non-zero, soon,
// naming the lost rank.
//   failure_app <mode>   mode: kill9 | abort | _exit0 | exit0 | hang | none
// The failing rank is the last one. It prints "FAILING_AT <unix seconds>" first.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "horovodlite/horovodlite.h"

using namespace horovodlite;

namespace {

double unix_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

void fail(const std::string& mode) {
  std::fprintf(stderr, "FAILING_AT %.3f rank %d mode %s\n", unix_now(), rank(), mode.c_str());
  std::fflush(stderr);
  if (mode == "kill9") raise(SIGKILL);
  if (mode == "abort") std::abort();
  if (mode == "_exit0") _exit(0);
  if (mode == "exit0") std::exit(0);   // without shutdown(): the at-exit path
  if (mode == "hang") raise(SIGSTOP);  // alive but silent: only the watchdog notices
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "none";
  Status s = init();
  if (!s.ok()) {
    std::fprintf(stderr, "init failed: %s\n", s.to_string().c_str());
    return 2;
  }
  const int me = rank(), n = size();
  std::vector<float> v(1000);
  for (int step = 0; step < 100000; ++step) {
    if (step == 5 && me == n - 1) fail(mode);
    for (auto& x : v) x = 1.0f;
    TensorView t{v.data(), DataType::kFloat32, {static_cast<int64_t>(v.size())}};
    s = allreduce_async("step." + std::to_string(step % 4), t, t, {ReduceOp::kSum})->wait();
    if (!s.ok()) {
      std::fprintf(stderr, "rank %d: step %d failed: %s\n", me, step, s.to_string().c_str());
      return 3;
    }
    if (v[0] != static_cast<float>(n)) {
      std::fprintf(stderr, "rank %d: wrong sum %f\n", me, v[0]);
      return 4;
    }
    if (mode == "none" && step == 20) break;
  }
  const Status down = shutdown();
  if (!down.ok()) std::fprintf(stderr, "rank %d: shutdown: %s\n", me, down.to_string().c_str());
  return 0;
}
