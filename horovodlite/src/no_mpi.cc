// The MPI backend's entries (mpi/backend.h, World::init_mpi) in a build
// without MPI (HVL_WITH_MPI=OFF): every job runs on the transport (Gloo).
#include "mpi/backend.h"
#include "world.h"

namespace horovodlite {

Status World::init_mpi(const void*) {
  return Status::Unimplemented(
      "this build of horovodlite has no MPI (configured with HVL_WITH_MPI=OFF): start the job with "
      "horovodlite-run --gloo (or set HOROVOD_CONTROLLER=gloo), or rebuild with MPI");
}

namespace mpi {

bool built() { return false; }

void library_version(std::string* library, int* version, int* subversion) {
  library->clear();
  *version = 0;
  *subversion = 0;
}

int thread_level() { return -1; }
const char* thread_level_name(int) { return "unknown"; }
bool abort_if_running(int) { return false; }

}  // namespace mpi
}  // namespace horovodlite
