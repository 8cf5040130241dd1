#include "job_failure.h"

#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <mutex>

#include "horovodlite/horovodlite.h"
#include "logging.h"

namespace horovodlite {

namespace {

// Read at process exit, possibly after static destructors have started: a
// trivially destructible mutex and a string that is never destroyed.
std::mutex g_mu;
std::string* g_reason = nullptr;  // null: no failure recorded

}  // namespace

void record_job_failure(const std::string& reason) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_reason == nullptr) g_reason = new std::string(reason);
}

void clear_job_failure() {
  std::lock_guard<std::mutex> lock(g_mu);
  delete g_reason;
  g_reason = nullptr;
}

void abort_job_if_failed() {
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_reason == nullptr) return;
    reason = *g_reason;
  }
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  const bool mpi = initialized && !finalized;
  HVL_LOG(kError, (mpi ? "ending the whole job (MPI_Abort, exit code " : "exiting (exit code ")
                      << kJobFailureExitCode
                      << ") instead of waiting for the other ranks at exit, which are out of step after: " << reason);
  std::fflush(stderr);
  // MPI_Abort tells mpirun, which ends every rank of the job (including one stuck
  // in its own code) and exits non-zero.
  if (mpi) MPI_Abort(MPI_COMM_WORLD, kJobFailureExitCode);
  _exit(kJobFailureExitCode);
}

}  // namespace horovodlite
