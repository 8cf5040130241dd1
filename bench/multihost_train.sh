#!/usr/bin/env bash
# The Python training benchmark's worker (bench/train_bench_worker.py: the same
# MLP, horovodlite.torch's DistributedOptimizer) across simulated hosts
# (ci/hosts.sh, each host's egress shaped to RATE) against one process: 1 host
# x 1 rank (no communication), then 2x1 and 2x2 hosts x ranks with fp32 and
# fp16 compression, REPEATS times each. Prints samples/s (global) and the step
# time per configuration (medians) and writes OUT/train_hosts.csv. Needs root.
#
#   bench/multihost_train.sh [--repeats N] [--rate 2gbit] [--steps 30] [--out DIR] [--python PY] [--build DIR]
#        [-- WORKER ARGS...]    (e.g. -- --model resnet18 --batch-size 8)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
repeats=3 rate=2gbit steps=30 out=multihost_train build="$ROOT/build" py=/work/main/.venv/bin/python
[ -x "$py" ] || py=/usr/bin/python3
while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) repeats="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --python) py="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: $0 [--repeats N] [--rate 2gbit] [--steps 30] [--out DIR] [--python PY] [--build DIR] [-- WORKER ARGS]" >&2
       exit 2 ;;
  esac
done
[ -d "$build/python/horovodlite" ] || { echo "$0: no $build/python/horovodlite (ci/build.sh first)" >&2; exit 1; }
mkdir -p "$out/runs"
out="$(cd "$out" && pwd)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONPATH="$build/python" OMP_NUM_THREADS=1
worker=("$py" "$ROOT/bench/train_bench_worker.py" --steps "$steps" "$@")

# run NAME HOSTS PER_HOST BACKEND COMPRESSION
run() {
  local name="$1" hosts="$2" per="$3" backend="$4" comp="$5" i
  for i in $(seq 1 "$repeats"); do
    local json="$out/runs/${name}_$i.json"
    rm -f "$json"
    if [ "$hosts" = 0 ]; then
      "${worker[@]}" --backend "$backend" --out "$json" >"$out/runs/${name}_$i.log" 2>&1 || true
    else
      "$ROOT/tests/multihost/run_on_hosts.sh" "$hosts" "$per" "$rate" -- "${worker[@]}" --backend "$backend" \
        --compression "$comp" --out "$json" >"$out/runs/${name}_$i.log" 2>&1 || true
    fi
    if [ ! -s "$json" ]; then  # a failed run is reported, not fatal
      echo "== $name run $i/$repeats: FAILED, see $out/runs/${name}_$i.log"
      continue
    fi
    echo "== $name run $i/$repeats: $("$py" -c 'import json,sys; r=json.load(open(sys.argv[1])); print("%.1f samples/s, step %.1f ms" % (r["samples_per_s"], r["step_ms"]))' "$json")"
  done
}
run 1x1 0 1 single none
run 2x1_fp32 2 1 hvd none
run 2x1_fp16 2 1 hvd fp16
run 2x2_fp32 2 2 hvd none
run 2x2_fp16 2 2 hvd fp16
"$py" - "$out" <<'PY'
import csv, glob, json, os, statistics, sys
out = sys.argv[1]
rows = {}
for path in sorted(glob.glob(os.path.join(out, "runs", "*.json"))):
    name = os.path.basename(path).rsplit("_", 1)[0]
    r = json.load(open(path))
    rows.setdefault(name, []).append((r["samples_per_s"], r["step_ms"], r["grad_mbytes"]))
base = statistics.median(v[0] for v in rows["1x1"])
with open(os.path.join(out, "train_hosts.csv"), "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["config", "runs", "samples_per_s", "step_ms", "grad_mbytes", "speedup_vs_1x1"])
    print("%-10s %5s %12s %9s %8s" % ("config", "runs", "samples/s", "step_ms", "vs 1x1"))
    for name, v in rows.items():
        s = statistics.median(x[0] for x in v)
        ms = statistics.median(x[1] for x in v)
        w.writerow([name, len(v), "%.1f" % s, "%.1f" % ms, "%.1f" % v[0][2], "%.2f" % (s / base)])
        print("%-10s %5d %12.1f %9.1f %8.2f" % (name, len(v), s, ms, s / base))
PY
