#!/usr/bin/env bash
# hvd.allreduce at 1-64 MiB (bench/launcher_allreduce_bench.py), np 2 on this
# host, MPI and Gloo jobs in turn for ROUNDS rounds, the time and the 1-minute
# load before each run (docs/transport.md's figures):
#   bash bench/gloo_vs_mpi_allreduce.sh               # mpi, Gloo shared memory, Gloo TCP
#   MODES="mpi shm" ROUNDS=5 bash bench/gloo_vs_mpi_allreduce.sh
set -uo pipefail
source "$(dirname "$0")/../ci/env.sh"
cd "$HVL_ROOT"
export PYTHONPATH="$HVL_BUILD/python"
bench=(bench/launcher_allreduce_bench.py --repeats "${REPEATS:-5}")
for round in $(seq 1 "${ROUNDS:-3}"); do
  for mode in ${MODES:-mpi shm tcp}; do
    echo "== round $round $mode $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
    case $mode in
      mpi) mpirun -np 2 $HVL_MPIRUN_JOB_FLAGS "$HVL_PYTHON" "${bench[@]}" ;;
      shm) "$HVL_PYTHON" -m horovodlite.run --gloo -np 2 "$HVL_PYTHON" "${bench[@]}" ;;
      tcp) HOROVODLITE_GLOO_SHM=0 "$HVL_PYTHON" -m horovodlite.run --gloo -np 2 "$HVL_PYTHON" "${bench[@]}" ;;
      *) echo "unknown mode $mode (mpi, shm, tcp)" >&2; exit 2 ;;
    esac 2>&1 | grep -E "median"
  done
done
echo "== end $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
