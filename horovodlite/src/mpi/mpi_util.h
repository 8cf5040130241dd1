// The MPI idioms every MPI-only file shares: MPI error codes as Status values
// (HVL_MPI_CHECK, as NCCL's NCCLCHECK), a wait that does not busy-spin, and
// Open MPI's control variables.
#pragma once

#include <mpi.h>

#include <cstdint>

#include "horovodlite/common.h"

namespace horovodlite {

// MPI error code -> Status (kInternal) naming the call; OK for MPI_SUCCESS.
Status mpi_status(int rc, const char* call);
// The same for the text of a call expression: names the function only
// ("MPI_Isend(buf, n, ...)" -> "MPI_Isend").
Status mpi_call_status(int rc, const char* call_text);

// Completes a non-blocking MPI request without spinning a core: tests, then
// yields, then sleeps with a growing back-off (capped at max_sleep_us).
Status mpi_wait(MPI_Request* request, const char* what, int max_sleep_us = 200);

// An integer control variable of the MPI library (an Open MPI MCA parameter,
// e.g. "btl_tcp_eager_limit") read through the MPI tool interface; 0 when this
// MPI has no such variable or it is not an integer. Read once per process and
// name, then kept (each read through MPI_T loads every Open MPI component).
int64_t mpi_control_variable(const char* name);

// Whether MPI is initialised and not yet finalized (MPI calls may be made).
bool mpi_running();

}  // namespace horovodlite

// The one MPI error idiom: evaluates an MPI call and, if it fails, returns a
// Status naming the call from the enclosing function.
//   HVL_MPI_CHECK(MPI_Bcast(...));                    // "MPI_Bcast failed: <MPI's message>"
//   HVL_MPI_CHECK_AS(MPI_Allreduce(...), "MPI_Allreduce (across nodes)");
// CUDA and NCCL calls have the same pair in cuda/cuda_status.h.
#define HVL_MPI_CHECK(call)                                                                    \
  do {                                                                                         \
    const int hvl_mpi_rc_ = (call);                                                            \
    if (hvl_mpi_rc_ != MPI_SUCCESS) return ::horovodlite::mpi_call_status(hvl_mpi_rc_, #call); \
  } while (0)
#define HVL_MPI_CHECK_AS(call, what) HVL_RETURN_IF_ERROR(::horovodlite::mpi_status((call), (what)))
