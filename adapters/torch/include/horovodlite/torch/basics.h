// Lifecycle and topology, re-exported for LibTorch programs. Unlike the core
// functions these throw HorovodError on failure.
#pragma once

namespace horovodlite {
namespace torch {

// Initialises the core (MPI, configuration, background thread). Idempotent.
void init();
// Collective: every rank must call it.
void shutdown();
bool is_initialized();

// These throw HorovodError(kPrecondition) when horovodlite is not initialised.
int rank();
int size();
int local_rank();
int local_size();
int cross_rank();
int cross_size();
bool mpi_threads_supported();

}  // namespace torch
}  // namespace horovodlite
