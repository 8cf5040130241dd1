#include "horovodlite/build_info.h"

#include "algorithms.h"
#include "horovodlite/config.h"
#include "horovodlite/horovodlite.h"
#include "horovodlite/version.h"
#include "kernels/reduce.h"
#include "mpi/backend.h"
#include "transport/world.h"

namespace horovodlite {

BuildInfo build_info() {
  BuildInfo info;
  info.version = HVL_VERSION_STRING;
  info.mpi = mpi::built();
  mpi::library_version(&info.mpi_library, &info.mpi_version, &info.mpi_subversion);
  info.cuda = cuda_built();
  info.cuda_runtime_version = device_runtime_version();
  info.gloo = gloo_built();
  info.nccl_version = nccl_version();
  info.cpu_avx2_f16c = kernels::cpu_has_avx2_f16c();
  info.compressions = "fp16,bf16";
  const Config defaults;
  info.ring_threshold_bytes = defaults.ring_threshold_bytes;
  info.ring_segment_bytes = defaults.ring_segment_bytes;
  return info;
}

bool gloo_built() { return transport::gloo_transport_built(); }

bool mpi_built() { return mpi::built(); }
int mpi_thread_level() { return mpi::thread_level(); }
const char* mpi_thread_level_name(int level) { return mpi::thread_level_name(level); }

}  // namespace horovodlite
