// What the transport-neutral core asks of the MPI backend, without MPI's
// headers: defined in mpi/ when the build has MPI (HVL_WITH_MPI), in no_mpi.cc
// otherwise. The others: World::init_mpi (world.h) and the MPI algorithms that
// algorithms.cc registers.
#pragma once

#include <string>

namespace horovodlite {
namespace mpi {

// Whether this build has the MPI backend.
bool built();
// MPI_Get_library_version's first line and the MPI standard's version (empty
// and 0 without MPI). May be called before MPI is initialised.
void library_version(std::string* library, int* version, int* subversion);
// The thread level MPI provides, or -1 while MPI is not running; its name.
int thread_level();
const char* thread_level_name(int level);
// If MPI is running: MPI_Abort(MPI_COMM_WORLD, code), which makes mpirun end
// every rank. Returns false (and does nothing) otherwise.
bool abort_if_running(int code);

}  // namespace mpi
}  // namespace horovodlite
