// stall_exit_app's scenario through the LibTorch adapter, where the stall error
// is a horovodlite::torch::HorovodError exception:
//   stall_exit_torch_app throw   the exception propagates out of main
//   stall_exit_torch_app catch   the program catches it, calls shutdown() and returns 0
// The sleeping rank prints "FAILING_AT <unix seconds>"; in catch mode the others
// print "ERROR_AT <unix seconds>" with the message.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "horovodlite/torch.h"

namespace hvd = horovodlite::torch;

namespace {

double unix_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "throw";
  if (mode != "throw" && mode != "catch") {
    std::fprintf(stderr, "usage: stall_exit_torch_app throw|catch\n");
    return 2;
  }
  hvd::init();
  const int me = hvd::rank(), n = hvd::size();
  at::Tensor t = torch::ones({1000});
  for (int step = 0; step < 30; ++step) hvd::allreduce(t, "grad." + std::to_string(step % 4));
  if (me == n - 1) {
    std::fprintf(stderr, "FAILING_AT %.3f rank %d sleeps in its own code\n", unix_now(), me);
    std::fflush(stderr);
    std::this_thread::sleep_for(std::chrono::seconds(600));
    return 0;
  }
  if (mode == "throw") {
    hvd::allreduce(t, "grad.stalled");  // std::terminate prints the exception's message
    return 5;                           // cannot happen: the last rank never submits it
  }
  try {
    hvd::allreduce(t, "grad.stalled");
  } catch (const hvd::HorovodError& e) {
    std::fprintf(stderr, "ERROR_AT %.3f rank %d: %s\n", unix_now(), me, e.what());
    std::fflush(stderr);
    hvd::shutdown();
    return 0;
  }
  return 5;
}
