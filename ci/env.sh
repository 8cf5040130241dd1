# Sourced by the ci scripts: which PyTorch to build against, and mpirun settings
# that work as root, with more ranks than cores, and without Open MPI's busy
# polling fighting the background thread.
#
# HVL_TORCH picks the PyTorch (LibTorch for C++, torch for Python):
#   pypi    (default) PyTorch 2.x from PyPI (pinned in ci/setup_venv.sh, 2.13.0)
#           in a venv of python3 at $HVL_VENV (default ./.venv); build dir ./build
#   debian  Debian 12's libtorch-dev + python3-torch 1.13.1 with /usr/bin/python3;
#           build dir ./build-debian
# HVL_BUILD and HVL_PYTHON override the build directory and the interpreter.
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_MCA_btl='^openib'
HVL_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export HVL_ROOT
export HVL_JOBS="${HVL_JOBS:-2}"
export HVL_TORCH="${HVL_TORCH:-pypi}"
case "$HVL_TORCH" in
  pypi)
    export HVL_VENV="${HVL_VENV:-$HVL_ROOT/.venv}"
    export HVL_BUILD="${HVL_BUILD:-$HVL_ROOT/build}"
    export HVL_PYTHON="${HVL_PYTHON:-$HVL_VENV/bin/python}"
    ;;
  debian)
    export HVL_BUILD="${HVL_BUILD:-$HVL_ROOT/build-debian}"
    export HVL_PYTHON="${HVL_PYTHON:-/usr/bin/python3}"
    ;;
  *)
    echo "ci/env.sh: HVL_TORCH must be 'pypi' or 'debian', not '$HVL_TORCH'" >&2
    return 2 2>/dev/null || exit 2
    ;;
esac
