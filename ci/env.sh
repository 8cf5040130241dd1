# Sourced by the ci scripts: mpirun settings that work as root, with more ranks
# than cores, and without Open MPI's busy polling fighting the background thread.
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_MCA_btl='^openib'
HVL_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export HVL_ROOT
export HVL_BUILD="${HVL_BUILD:-$HVL_ROOT/build}"
export HVL_JOBS="${HVL_JOBS:-2}"
# The interpreter that sees Debian's torch.
export HVL_PYTHON="${HVL_PYTHON:-/usr/bin/python3}"
