#!/usr/bin/env bash
# Adasum against Sum by core placement: runs the issue-28 benches RUNS times
# each, labels every run with build/bench/core_latency just before and after it
# ("near": the two cores share a last-level cache; "far": they do not; a VM's
# host can move them between the two, docs/results/2026-11-adasum.md, "Near and
# far cores"), and prints each bench's Sum/Adasum ratio by placement (median, range, runs).
# Runs whose two labels differ changed placement mid-run and are not counted.
#
#   bash bench/adasum_by_placement.sh                  # RUNS=8 NPS="2 4" KINDS="py cc"
#   RUNS=12 NPS=4 KINDS=py bash bench/adasum_by_placement.sh
#
# LIB=<dir holding libhorovodlite.so.0> runs another build's library (A/B);
# LOG=<file> keeps every run's line (default: a temporary file).
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/env.sh
RUNS="${RUNS:-8}"
NPS="${NPS:-2 4}"
KINDS="${KINDS:-py cc}"
LOG="${LOG:-$(mktemp /tmp/adasum_by_placement.XXXXXX)}"
latency="$HVL_BUILD/bench/core_latency"
for exe in "$latency" "$HVL_BUILD/bench/adasum_bench"; do
  [ -x "$exe" ] || { echo "adasum_by_placement: $exe is missing; run bash ci/build.sh" >&2; exit 2; }
done
lib_env=(env)
fwd=()
if [ -n "${LIB:-}" ]; then
  lib_env=(env "LD_LIBRARY_PATH=$LIB")
  fwd=(-x LD_LIBRARY_PATH)
fi
label() { "$latency" | sed -E 's/.*\((near|far)\).*/\1/'; }

: >"$LOG"
for ((i = 1; i <= RUNS; i++)); do
  for np in $NPS; do
    rounds=20
    [ "$np" -ge 4 ] && rounds=10
    for kind in $KINDS; do
      before=$(label)
      if [ "$kind" = py ]; then
        out=$("${lib_env[@]}" env PYTHONPATH="$HVL_BUILD/python" mpirun -np "$np" $HVL_MPIRUN_JOB_FLAGS \
          "${fwd[@]}" "$HVL_PYTHON" bench/adasum_python_bench.py --rounds "$rounds" 2>&1)
      else
        out=$("${lib_env[@]}" mpirun -np "$np" $HVL_MPIRUN_JOB_FLAGS "${fwd[@]}" \
          "$HVL_BUILD/bench/adasum_bench" --rounds "$rounds" 2>&1)
      fi
      after=$(label)
      sum=$(awk '$1 == "sum" {print $2}' <<<"$out")
      ada=$(awk '$1 == "adasum" && $2 ~ /^[0-9.]+$/ {print $2}' <<<"$out")
      if [ -z "$sum" ] || [ -z "$ada" ]; then
        echo "adasum_by_placement: np $np $kind printed no times:" >&2
        echo "$out" >&2
        exit 1
      fi
      echo "$(date -u +%H:%M:%S) $before $after np$np $kind $sum $ada" | tee -a "$LOG"
    done
  done
done

echo "# ratio = Sum median / Adasum median of a run; by placement: median (range), runs; times: medians (ms)"
"$HVL_PYTHON" - "$LOG" <<'EOF'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    t, before, after, np_, kind, s, a = line.split()
    if before == after:
        runs[(np_, kind, before)].append((float(s), float(a)))
for (np_, kind, place), v in sorted(runs.items()):
    r = sorted(s / a for s, a in v)
    print(f"{np_} {kind:2s} {place:4s}  ratio {statistics.median(r):.2f} ({r[0]:.2f}-{r[-1]:.2f}), {len(r)} runs;"
          f"  Sum {statistics.median(s for s, _ in v):.2f} ms, Adasum {statistics.median(a for _, a in v):.2f} ms")
EOF
