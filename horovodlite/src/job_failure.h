// Failures after which this process must not wait for its peers at exit.
//
// After a stall shutdown (a peer rank is stuck in its own code) or a lost
// negotiation (a peer is unreachable), the other ranks are out of step with this
// one: finalizing MPI at exit (a collective in Open MPI) would wait for them for
// ever, and mpirun would never end the job. The runtime records such a failure
// here; the exit paths (the at-exit handlers of api.cc and mpi/mpi_world.cc, the
// Python module's, or the program's own call of abort_job_if_failed()) then end
// the whole job with MPI_Abort, after printing the reason on stderr. A later
// successful init() (collective: every rank is back in step) clears it.
#pragma once

#include <string>

namespace horovodlite {

// Keeps the first reason until cleared.
void record_job_failure(const std::string& reason);
void clear_job_failure();

}  // namespace horovodlite
