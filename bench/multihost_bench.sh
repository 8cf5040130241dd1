#!/usr/bin/env bash
# Allreduce across simulated hosts (ci/hosts.sh: network namespaces, each host's
# egress shaped to RATE): horovodlite (fp32, fp16) against MPI_Allreduce in the
# same run, for 2x1, 2x2 (hierarchical, and the flat ring with
# HOROVODLITE_HIERARCHICAL_ALLREDUCE=0) and 4x1 hosts x ranks, REPEATS times
# each. Writes OUT/runs/*.{csv,log}, OUT/multihost_busbw.csv (medians) and
# OUT/multihost_busbw.png, and prints the 64 MiB and 4 KiB figures. Needs root.
#
#   bench/multihost_bench.sh [--repeats N] [--rate 2gbit] [--out DIR] [--build DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
repeats=3 rate=2gbit out=multihost_bench build="$ROOT/build"
while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) repeats="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    *) echo "usage: $0 [--repeats N] [--rate 2gbit] [--out DIR] [--build DIR]" >&2; exit 2 ;;
  esac
done
bench="$build/bench/allreduce_bench"
[ -x "$bench" ] || { echo "$0: build $bench first (ci/build.sh)" >&2; exit 1; }
mkdir -p "$out/runs"
out="$(cd "$out" && pwd)"
rm -f "$out/failed_runs.txt"
uptime | tee "$out/uptime_start.txt"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# run NAME HOSTS PER_HOST [ENV=VALUE...]
run() {
  local name="$1" hosts="$2" per="$3"
  shift 3
  local i
  for i in $(seq 1 "$repeats"); do
    echo "== $name run $i/$repeats"
    # A failed run (e.g. the watchdog ending a stalled job) is logged and
    # counted, not fatal: the medians use the runs that completed.
    if env "$@" "$ROOT/tests/multihost/run_on_hosts.sh" "$hosts" "$per" "$rate" -- "$bench" --min-bytes 4096 \
      --max-bytes $((64 << 20)) --iters-percent 25 --no-resnet --csv "$out/runs/${name}_$i.csv" \
      >"$out/runs/${name}_$i.log" 2>&1; then
      grep -E "^ +67108864|latency" "$out/runs/${name}_$i.log" || true
    else
      echo "FAILED (exit $?): $(grep -m1 -E 'no progress|error' "$out/runs/${name}_$i.log" | cut -c1-200)"
      echo "$name $i" >>"$out/failed_runs.txt"
      rm -f "$out/runs/${name}_$i.csv"
    fi
  done
}
run 2x1 2 1
run 2x2 2 2
run 2x2_flat 2 2 HOROVODLITE_HIERARCHICAL_ALLREDUCE=0
run 4x1 4 1
uptime | tee "$out/uptime_end.txt"
[ -f "$out/failed_runs.txt" ] && echo "failed runs: $(paste -sd, "$out/failed_runs.txt")"
/usr/bin/python3 "$ROOT/bench/plot_multihost.py" "$out"
