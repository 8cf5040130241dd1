#!/usr/bin/env bash
# Issue 25's stall count: 2x2 sweeps of hvd.allreduce (4 KiB to 64 MiB,
# bench/launcher_allreduce_bench.py) across simulated hosts (ci/hosts.sh, each
# host's egress shaped to RATE) beside BUSY busy loops, launched in turn by
# mpirun (horovodlite-run) and over Gloo (horovodlite-run --gloo), RUNS of each
# or until MINUTES have passed (then both have the same count). A run stalls
# when the watchdog ends it (HOROVODLITE_PEER_TIMEOUT_SECONDS, 60 s) or it runs
# past LIMIT s. One line per run (OUT/runs.txt, logs in OUT/), then the counts.
# Needs root.
#
#   bench/stall_sweeps.sh [--runs 50] [--busy 6] [--minutes 600] [--rate 2gbit] [--limit 300] [--out DIR]
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
RUNS=50 BUSY=6 MINUTES=600 RATE=2gbit LIMIT=300 OUT=stall_sweeps
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS=$2; shift 2 ;;
    --busy) BUSY=$2; shift 2 ;;
    --minutes) MINUTES=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --limit) LIMIT=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "stall_sweeps: unknown argument $1" >&2; exit 2 ;;
  esac
done
source "$ROOT/ci/env.sh"
export PYTHONPATH="${PYTHONPATH:-$HVL_BUILD/python}"
mkdir -p "$OUT"
TB="ss$$"
busy=()
cleanup() {
  for p in "${busy[@]}"; do kill "$p" 2>/dev/null; done
  HVL_TESTBED=$TB "$ROOT/ci/hosts.sh" down >/dev/null 2>&1
}
trap cleanup EXIT
HVL_TESTBED=$TB "$ROOT/ci/hosts.sh" up 2 "$RATE" >"$OUT/testbed.txt" 2>&1 || { cat "$OUT/testbed.txt"; exit 1; }
for _ in $(seq "$BUSY"); do
  (while :; do :; done) &
  busy+=($!)
done
SIZES=4096,65536,1048576,4194304,16777216,67108864
end=$(($(date +%s) + MINUTES * 60))
declare -A stalls runs
: >"$OUT/runs.txt"
for i in $(seq "$RUNS"); do
  [ "$(date +%s)" -lt "$end" ] || break
  for mode in mpi gloo; do
    flag=""
    [ "$mode" = gloo ] && flag=--gloo
    log="$OUT/$mode.$i.log"
    t0=$(date +%s.%N)
    timeout -k 10 "$LIMIT" "$HVL_PYTHON" -m horovodlite.run $flag --hosts-netns "$TB" -np 4 -H "$TB-h1:2,$TB-h2:2" \
      "$HVL_PYTHON" "$ROOT/bench/launcher_allreduce_bench.py" --repeats 3 --sizes "$SIZES" >"$log" 2>&1
    rc=$?
    t=$(echo "$(date +%s.%N) - $t0" | bc)
    stalled=no
    if [ $rc -ne 0 ] || grep -q "no progress for" "$log"; then stalled=yes; fi
    runs[$mode]=$((${runs[$mode]:-0} + 1))
    [ $stalled = yes ] && stalls[$mode]=$((${stalls[$mode]:-0} + 1))
    printf '%s run %d: %s exit %d, %.1f s, load %s\n' "$(date -u +%H:%M:%S)" "$i" "$mode" "$rc" "$t" \
      "$(cut -d' ' -f1 /proc/loadavg)" | tee -a "$OUT/runs.txt"
  done
done
for mode in mpi gloo; do
  echo "$mode: ${stalls[$mode]:-0} of ${runs[$mode]:-0} runs stalled" | tee -a "$OUT/runs.txt"
done
