#!/usr/bin/env python3
"""A/B of two builds of bench/allreduce_bench, run in turn (A, B, A, B, ...).

Each build is a folder holding its `allreduce_bench` and its `libhorovodlite.so*`
(copied aside so that the two never share a library):

    source ci/env.sh
    python3 bench/ab_allreduce.py --a /tmp/ab/before --b /tmp/ab/after --pairs 10

Prints, per size, the median of each build's mean time per allreduce (fp32 and
fp16 wire) and the median of the per-pair ratios B / A (< 1: B is faster). The
first pair warms the page cache and is not counted.
"""

import argparse
import os
import shlex
import statistics
import subprocess


def run_once(folder, np, extra):
    env = dict(os.environ, LD_LIBRARY_PATH=folder)
    flags = shlex.split(os.environ.get("HVL_MPIRUN_JOB_FLAGS", ""))
    cmd = (["mpirun", "-np", str(np)] + flags + ["-x", "LD_LIBRARY_PATH",
           os.path.join(folder, "allreduce_bench")] + extra)
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    rows = {}
    latency = None
    for line in out.splitlines():
        parts = line.split()
        if line.startswith("latency 4 KiB"):
            latency = float(line.split("horovodlite ")[1].split()[0])
        elif parts and parts[0].isdigit() and len(parts) >= 9:
            rows[int(parts[0])] = (float(parts[3]), float(parts[6]))
    if not rows:
        raise SystemExit("no result rows in:\n" + out)
    return rows, latency


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True, help="folder of build A (before)")
    ap.add_argument("--b", required=True, help="folder of build B (after)")
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--min-bytes", default="1048576")
    ap.add_argument("--max-bytes", default="67108864")
    args = ap.parse_args()
    extra = ["--min-bytes", args.min_bytes, "--max-bytes", args.max_bytes, "--no-resnet"]
    res = {"a": [], "b": []}
    for i in range(args.pairs + 1):
        for key, folder in (("a", args.a), ("b", args.b)):
            r = run_once(folder, args.np, extra)
            if i > 0:
                res[key].append(r)
    sizes = sorted(res["a"][0][0])
    print(f"# {args.pairs} pairs, np {args.np}; medians of the benchmark's mean time per call")
    print("| size | wire | A | B | B / A, median of pairs (min-max) |")
    print("|---|---|---|---|---|")
    for size in sizes:
        for w, wire in enumerate(("fp32", "fp16")):
            a = [r[0][size][w] for r in res["a"]]
            b = [r[0][size][w] for r in res["b"]]
            ratios = [y / x for x, y in zip(a, b)]
            print(f"| {size >> 20} MiB | {wire} | {statistics.median(a):.0f} us | "
                  f"{statistics.median(b):.0f} us | {statistics.median(ratios):.2f} "
                  f"({min(ratios):.2f}-{max(ratios):.2f}) |")
    la = [r[1] for r in res["a"] if r[1] is not None]
    lb = [r[1] for r in res["b"] if r[1] is not None]
    if la and lb:
        print(f"| 4 KiB latency | fp32 | {statistics.median(la):.1f} us | "
              f"{statistics.median(lb):.1f} us | {statistics.median(lb) / statistics.median(la):.2f} |")


if __name__ == "__main__":
    main()
