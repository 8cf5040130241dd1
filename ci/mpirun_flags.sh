# Sourced: reads the mpirun flags from their one source,
# python/horovodlite/runner/mpi_flags.py, into two strings (word-split them:
# no flag holds a space):
#   HVL_MPIRUN_JOB_FLAGS    --oversubscribe --bind-to none --mca mpi_yield_when_idle 1
#   HVL_MPIRUN_EXCLUSIONS   --mca btl ^openib,ofi --mca mtl ^ofi
# Sets no OMPI_MCA_* variables (ci/env.sh does, from these).
_hvl_flags_file="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/python/horovodlite/runner/mpi_flags.py"
HVL_MPIRUN_JOB_FLAGS=$(sed -n 's/^JOB_FLAGS = "\(.*\)"\.split()$/\1/p' "$_hvl_flags_file")
HVL_MPIRUN_EXCLUSIONS=$(sed -n 's/^EXCLUSIONS = "\(.*\)"\.split()$/\1/p' "$_hvl_flags_file")
if [ -z "$HVL_MPIRUN_JOB_FLAGS" ] || [ -z "$HVL_MPIRUN_EXCLUSIONS" ]; then
  echo "ci/mpirun_flags.sh: cannot read JOB_FLAGS / EXCLUSIONS from $_hvl_flags_file" >&2
  return 2 2>/dev/null || exit 2
fi
unset _hvl_flags_file
