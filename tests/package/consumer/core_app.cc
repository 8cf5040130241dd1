#include <horovodlite/horovodlite.h>

#include <cstdio>
int main() {
  namespace hvl = horovodlite;
  if (!hvl::init().ok()) return 1;
  float x = 1.0f;
  hvl::TensorView t{&x, hvl::DataType::kFloat32, {1}};
  hvl::Status s = hvl::allreduce_async("x", t, t, {hvl::ReduceOp::kSum})->wait();
  std::printf("core rank %d: %s x=%g\n", hvl::rank(), s.to_string().c_str(), x);
  const bool ok = s.ok() && x == hvl::size();
  const bool down = hvl::shutdown().ok();
  return ok && down ? 0 : 1;
}
