// mpi/backend.h for a build with MPI.
#include <mpi.h>

#include <cstring>

#include "mpi/backend.h"
#include "mpi/mpi_util.h"

namespace horovodlite {
namespace mpi {

bool built() { return true; }

void library_version(std::string* library, int* version, int* subversion) {
  // Both may be called before MPI_Init (MPI-3.0, section 8.7).
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int length = 0;
  library->clear();
  if (MPI_Get_library_version(text, &length) == MPI_SUCCESS) {
    // Up to the first NUL (Open MPI counts its terminator in `length`).
    library->assign(text, strnlen(text, static_cast<size_t>(length)));
    const size_t end = library->find_first_of("\r\n");
    if (end != std::string::npos) library->resize(end);
    while (!library->empty() && (library->back() == ' ' || library->back() == ',')) library->pop_back();
  }
  MPI_Get_version(version, subversion);
}

int thread_level() {
  if (!mpi_running()) return -1;
  int level = -1;
  MPI_Query_thread(&level);
  return level;
}

const char* thread_level_name(int level) {
  if (level == MPI_THREAD_SINGLE) return "MPI_THREAD_SINGLE";
  if (level == MPI_THREAD_FUNNELED) return "MPI_THREAD_FUNNELED";
  if (level == MPI_THREAD_SERIALIZED) return "MPI_THREAD_SERIALIZED";
  if (level == MPI_THREAD_MULTIPLE) return "MPI_THREAD_MULTIPLE";
  return "unknown";
}

bool abort_if_running(int code) {
  if (!mpi_running()) return false;
  MPI_Abort(MPI_COMM_WORLD, code);
  return true;
}

}  // namespace mpi
}  // namespace horovodlite
