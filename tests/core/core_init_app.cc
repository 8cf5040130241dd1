// A program of the core alone (no LibTorch): init(), one allreduce, shutdown().
// tests/python/launchers and tests/python/slurm start it under other launchers:
// it must refuse their worlds with init()'s message, not form a world of one.
#include <horovodlite/horovodlite.h>

#include <cstdio>

int main() {
  namespace hvl = horovodlite;
  const hvl::Status started = hvl::init();
  if (!started.ok()) {
    std::printf("%s\n", started.to_string().c_str());
    return 1;
  }
  float x = 1.0f;
  hvl::TensorView t{&x, hvl::DataType::kFloat32, {1}};
  const hvl::Status s = hvl::allreduce_async("x", t, t, {hvl::ReduceOp::kSum})->wait();
  std::printf("core rank %d of %d: %s x=%g\n", hvl::rank(), hvl::size(), s.to_string().c_str(), x);
  const bool ok = s.ok() && x == hvl::size();
  return hvl::shutdown().ok() && ok ? 0 : 1;
}
