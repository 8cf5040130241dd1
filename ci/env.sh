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
# The mpirun flags (python/horovodlite/runner/mpi_flags.py, read by
# ci/mpirun_flags.sh), also as the OMPI_MCA_* variables they stand for
# (hvl_mpirun_mca), so that a plain `mpirun -np N ...` gets them. Among them:
# Open MPI 4.1.4 (Debian 12) can hang inside MPI_Init in its OFI (libfabric)
# components: a mutex in opal_common_ofi_export_memory_monitor left
# locked (seen here about once in 40 launches under load). No libfabric network
# here: they are left out (EXCLUSIONS).
source "$(dirname "${BASH_SOURCE[0]}")/mpirun_flags.sh" || return 2 2>/dev/null || exit 2
export HVL_MPIRUN_JOB_FLAGS HVL_MPIRUN_EXCLUSIONS
_hvl_mca=$(hvl_mpirun_mca "$HVL_MPIRUN_JOB_FLAGS" "$HVL_MPIRUN_EXCLUSIONS") || return 2 2>/dev/null || exit 2
while IFS= read -r _hvl_setting; do export "OMPI_MCA_$_hvl_setting"; done <<<"$_hvl_mca"
unset _hvl_mca _hvl_setting
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
