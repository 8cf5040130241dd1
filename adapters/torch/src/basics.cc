#include "horovodlite/torch/basics.h"

#include "horovodlite/horovodlite.h"
#include "horovodlite/torch/error.h"
#include "launchers.h"

namespace horovodlite {
namespace torch {
namespace {

int checked(int value, const char* what) {
  if (!horovodlite::is_initialized()) {
    throw HorovodError(StatusCode::kPrecondition,
                       std::string("horovodlite has not been initialized; call init() before ") + what + "()");
  }
  return value;
}

}  // namespace

void init() {
  if (horovodlite::is_initialized()) return;
  InitOptions options;
  launchers::join(&options);  // torchrun's or Slurm's world, when the environment names one
  throw_if_error(horovodlite::init(options));
}
void shutdown() { throw_if_error(horovodlite::shutdown()); }
bool is_initialized() { return horovodlite::is_initialized(); }

int rank() { return checked(horovodlite::rank(), "rank"); }
int size() { return checked(horovodlite::size(), "size"); }
int local_rank() { return checked(horovodlite::local_rank(), "local_rank"); }
int local_size() { return checked(horovodlite::local_size(), "local_size"); }
int cross_rank() { return checked(horovodlite::cross_rank(), "cross_rank"); }
int cross_size() { return checked(horovodlite::cross_size(), "cross_size"); }
bool mpi_threads_supported() { return horovodlite::mpi_threads_supported(); }

}  // namespace torch
}  // namespace horovodlite
