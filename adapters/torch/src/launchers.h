// init() under torchrun and Slurm for LibTorch programs: the C++ twin of
// python/horovodlite/common/launchers.py for the launchers a C++ program meets
// (docs/launchers.md). No initialised torch.distributed here: LibTorch C++ has
// no default group.
#pragma once

#include "horovodlite/horovodlite.h"

namespace horovodlite {
namespace torch {
namespace launchers {

// Fills options->store* when the environment names a torchrun or Slurm world
// (and no horovodlite launcher or mpirun placed this process): the ranks meet
// in torch's TCPStore at MASTER_ADDR:MASTER_PORT (torchrun's agent store, or one
// that rank 0 serves). Throws HorovodError naming the variables on a half-set
// environment, a store nobody serves, a rank claimed twice. False: not such a
// world (the core reads the environment as before).
bool join(InitOptions* options);

}  // namespace launchers
}  // namespace torch
}  // namespace horovodlite
