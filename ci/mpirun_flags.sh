# Sourced: reads the mpirun flags from their one source,
# python/horovodlite/runner/mpi_flags.py, into two strings (word-split them:
# no flag holds a space): HVL_MPIRUN_JOB_FLAGS (its JOB_FLAGS) and
# HVL_MPIRUN_EXCLUSIONS (its EXCLUSIONS). Sets no OMPI_MCA_* variables:
# hvl_mpirun_mca FLAGS prints the KEY=VALUE MCA settings that FLAGS (one string
# or several) stand for, one a line, as mpi_flags.mca_settings does in Python
# (--oversubscribe is rmaps_base_oversubscribe=1, --bind-to X
# hwloc_base_binding_policy=X, --mca K V K=V); ci/env.sh exports them as
# OMPI_MCA_* variables, ci/hosts.sh writes them into a testbed's mpi.env.
_hvl_flags_file="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/python/horovodlite/runner/mpi_flags.py"
HVL_MPIRUN_JOB_FLAGS=$(sed -n 's/^JOB_FLAGS = "\(.*\)"\.split()$/\1/p' "$_hvl_flags_file")
HVL_MPIRUN_EXCLUSIONS=$(sed -n 's/^EXCLUSIONS = "\(.*\)"\.split()$/\1/p' "$_hvl_flags_file")
if [ -z "$HVL_MPIRUN_JOB_FLAGS" ] || [ -z "$HVL_MPIRUN_EXCLUSIONS" ]; then
  echo "ci/mpirun_flags.sh: cannot read JOB_FLAGS / EXCLUSIONS from $_hvl_flags_file" >&2
  return 2 2>/dev/null || exit 2
fi
unset _hvl_flags_file

hvl_mpirun_mca() {
  local -a f
  read -ra f <<<"$*"
  local i=0
  while [ "$i" -lt "${#f[@]}" ]; do
    case "${f[$i]}" in
      --oversubscribe) echo "rmaps_base_oversubscribe=1"; i=$((i + 1)) ;;
      --bind-to) echo "hwloc_base_binding_policy=${f[$((i + 1))]}"; i=$((i + 2)) ;;
      --mca) echo "${f[$((i + 1))]}=${f[$((i + 2))]}"; i=$((i + 3)) ;;
      *) echo "ci/mpirun_flags.sh: no MCA parameter for the mpirun flag '${f[$i]}'" >&2; return 2 ;;
    esac
  done
}
