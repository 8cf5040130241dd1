// What this build of horovodlite has: the MPI it links (if any), CUDA/NCCL, the vector
// kernels this CPU runs and the ring's defaults. horovodlite-run --check-build
// prints it. Every function may be called before init().
#pragma once

#include <cstdint>
#include <string>

namespace horovodlite {

struct BuildInfo {
  std::string version;               // HVL_VERSION_STRING
  bool mpi = false;                  // the MPI backend is built in (mpi_built())
  std::string mpi_library;           // MPI_Get_library_version, first line
  int mpi_version = 0;               // the MPI standard the library implements,
  int mpi_subversion = 0;            //   e.g. 3 and 1 (MPI_Get_version)
  bool cuda = false;                 // the CUDA/NCCL backend is built in
  int cuda_runtime_version = 0;      // CUDART_VERSION built against (12040 = 12.4); 0 without CUDA
  bool gloo = false;                 // the Gloo TCP transport (gloo_built())
  int nccl_version = 0;              // e.g. 22809 for 2.28.9; 0 without NCCL
  bool cpu_avx2_f16c = false;        // reductions and fp16/bf16 conversions use the AVX2/F16C kernels here
  std::string compressions;          // the allreduce wire compressions: "fp16,bf16"
  int64_t ring_threshold_bytes = 0;  // defaults of HOROVODLITE_RING_THRESHOLD and
  int64_t ring_segment_bytes = 0;    //   HOROVODLITE_RING_SEGMENT_BYTES
};

BuildInfo build_info();

// The thread level MPI provides (MPI_THREAD_SINGLE .. MPI_THREAD_MULTIPLE, as
// MPI numbers them), or -1 while MPI is not initialised.
int mpi_thread_level();
// "MPI_THREAD_SINGLE", ..., "MPI_THREAD_MULTIPLE"; "unknown" for anything else.
const char* mpi_thread_level_name(int level);

}  // namespace horovodlite
