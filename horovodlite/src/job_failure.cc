#include "job_failure.h"

#include <unistd.h>

#include <cstdio>
#include <mutex>

#include "horovodlite/horovodlite.h"
#include "logging.h"
#include "mpi/backend.h"

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
  const bool mpi = mpi::thread_level() >= 0;  // MPI is running
  HVL_LOG(kError, (mpi ? "ending the whole job (MPI_Abort, exit code " : "exiting (exit code ")
                      << kJobFailureExitCode
                      << ") instead of waiting for the other ranks at exit, which are out of step after: " << reason);
  std::fflush(stderr);
  // MPI_Abort tells mpirun, which ends every rank of the job (including one stuck
  // in its own code) and exits non-zero.
  mpi::abort_if_running(kJobFailureExitCode);
  _exit(kJobFailureExitCode);
}

}  // namespace horovodlite
