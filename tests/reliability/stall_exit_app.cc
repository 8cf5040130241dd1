// A rank stuck in its own code (a data-loader deadlock): after 30 allreduces the
// last rank sleeps for 600 s while the others wait in an allreduce of
// 'grad.stalled'. With HOROVODLITE_STALL_SHUTDOWN_TIME_SECONDS set, the others
// get the stall error naming the tensor and the missing rank; the whole job must
// then end, non-zero, however they exit (run_failure.sh checks it):
//   stall_exit_app return   the error ends main: return 3 (exit without shutdown())
//   stall_exit_app clean    the program handles it: shutdown(), then return 0
// The sleeping rank prints "FAILING_AT <unix seconds>", the others
// "ERROR_AT <unix seconds>" when the error reaches them.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "horovodlite/horovodlite.h"

using namespace horovodlite;

namespace {

double unix_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

Status sum(const std::string& name, std::vector<float>& v) {
  TensorView t{v.data(), DataType::kFloat32, {static_cast<int64_t>(v.size())}};
  return allreduce_async(name, t, t, {ReduceOp::kSum})->wait();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "return";
  if (mode != "return" && mode != "clean") {
    std::fprintf(stderr, "usage: stall_exit_app return|clean\n");
    return 2;
  }
  Status s = init();
  if (!s.ok()) {
    std::fprintf(stderr, "init failed: %s\n", s.to_string().c_str());
    return 2;
  }
  const int me = rank(), n = size();
  std::vector<float> v(1000, 1.0f);
  for (int step = 0; step < 30; ++step) {
    s = sum("grad." + std::to_string(step % 4), v);
    if (!s.ok()) {
      std::fprintf(stderr, "rank %d: step %d failed: %s\n", me, step, s.to_string().c_str());
      return 4;
    }
  }
  if (me == n - 1) {
    std::fprintf(stderr, "FAILING_AT %.3f rank %d sleeps in its own code\n", unix_now(), me);
    std::fflush(stderr);
    std::this_thread::sleep_for(std::chrono::seconds(600));
    return 0;
  }
  s = sum("grad.stalled", v);
  std::fprintf(stderr, "ERROR_AT %.3f rank %d: %s\n", unix_now(), me, s.to_string().c_str());
  std::fflush(stderr);
  if (s.ok()) return 5;  // cannot happen: the last rank never submits it
  if (mode == "clean") {
    const Status down = shutdown();  // after the stall: the reason is already reported above
    if (!down.ok()) std::fprintf(stderr, "rank %d: shutdown: %s\n", me, down.to_string().c_str());
    return 0;
  }
  return 3;
}
