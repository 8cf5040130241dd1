#include "horovodlite/build_info.h"

#include <mpi.h>

#include <cstring>

#include "algorithms.h"
#include "horovodlite/config.h"
#include "horovodlite/horovodlite.h"
#include "horovodlite/version.h"
#include "kernels/reduce.h"
#include "transport/world.h"

namespace horovodlite {

BuildInfo build_info() {
  BuildInfo info;
  info.version = HVL_VERSION_STRING;
  // Both may be called before MPI_Init (MPI-3.0, section 8.7).
  char library[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int length = 0;
  if (MPI_Get_library_version(library, &length) == MPI_SUCCESS) {
    // Up to the first NUL (Open MPI counts its terminator in `length`).
    info.mpi_library.assign(library, strnlen(library, static_cast<size_t>(length)));
    const size_t end = info.mpi_library.find_first_of("\r\n");
    if (end != std::string::npos) info.mpi_library.resize(end);
    while (!info.mpi_library.empty() && (info.mpi_library.back() == ' ' || info.mpi_library.back() == ','))
      info.mpi_library.pop_back();
  }
  MPI_Get_version(&info.mpi_version, &info.mpi_subversion);
  info.cuda = cuda_built();
  info.cuda_runtime_version = device_runtime_version();
  info.gloo = gloo_built();
  info.nccl_version = nccl_version();
  info.cpu_avx2_f16c = kernels::cpu_has_avx2_f16c();
  const Config defaults;
  info.ring_threshold_bytes = defaults.ring_threshold_bytes;
  info.ring_segment_bytes = defaults.ring_segment_bytes;
  return info;
}

bool gloo_built() { return transport::gloo_transport_built(); }

int mpi_thread_level() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return -1;
  int level = -1;
  MPI_Query_thread(&level);
  return level;
}

const char* mpi_thread_level_name(int level) {
  if (level == MPI_THREAD_SINGLE) return "MPI_THREAD_SINGLE";
  if (level == MPI_THREAD_FUNNELED) return "MPI_THREAD_FUNNELED";
  if (level == MPI_THREAD_SERIALIZED) return "MPI_THREAD_SERIALIZED";
  if (level == MPI_THREAD_MULTIPLE) return "MPI_THREAD_MULTIPLE";
  return "unknown";
}

}  // namespace horovodlite
