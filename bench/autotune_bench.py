#!/usr/bin/env python3
"""The autotuner on the MLP training benchmark (bench/train_bench_worker.py).

1. One run with HOROVODLITE_AUTOTUNE=1 started from a poor configuration
   (HOROVODLITE_AUTOTUNE_START, default cycle time 20 ms and fusion 1 MiB), long
   enough for the default number of samples; the tuner's CSV log is kept.
2. Fixed-configuration runs (no tuning) of: the poor start, the tuner's final
   choice, and a few hand-tuned settings (the defaults and neighbours); each
   --repeats times, interleaved, median samples/s.
3. The ratio final / best hand-tuned, and a plot of the tuner's samples (bytes
   reduced per second) against the hand-tuned best (--png).

    .venv/bin/python bench/autotune_bench.py --np 2 --png docs/img/autotune.png --csv autotune.csv

horovodlite.torch must be importable: PYTHONPATH=<build>/python, or --pythonpath.
"""

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "train_bench_worker.py")
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
from horovodlite.runner.mpi_flags import EXCLUSIONS, JOB_FLAGS  # noqa: E402  (the one place they are written)

MPIRUN_FLAGS = JOB_FLAGS + EXCLUSIONS

HAND_TUNED = [
    ("default 1 ms, 128 MiB", {"HOROVODLITE_CYCLE_TIME": "1", "HOROVODLITE_FUSION_THRESHOLD": str(128 << 20)}),
    ("0.5 ms, 64 MiB", {"HOROVODLITE_CYCLE_TIME": "0.5", "HOROVODLITE_FUSION_THRESHOLD": str(64 << 20)}),
    ("2 ms, 16 MiB", {"HOROVODLITE_CYCLE_TIME": "2", "HOROVODLITE_FUSION_THRESHOLD": str(16 << 20)}),
    ("5 ms, 128 MiB", {"HOROVODLITE_CYCLE_TIME": "5", "HOROVODLITE_FUSION_THRESHOLD": str(128 << 20)}),
]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--start", default="FUSION_THRESHOLD=1048576,CYCLE_TIME=20",
                   help="HOROVODLITE_AUTOTUNE_START of the tuning run")
    p.add_argument("--tune-steps", type=int, default=400, help="training steps of the tuning run")
    p.add_argument("--steps", type=int, default=60, help="timed steps of each fixed run")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--pythonpath", default=None)
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--png", default=None)
    p.add_argument("--csv", default=None, help="the tuner's log is copied here")
    return p.parse_args(argv)


def run(args, env_extra, steps, out_dir, label):
    out = os.path.join(out_dir, "%s.json" % abs(hash((label, len(os.listdir(out_dir))))))
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("HOROVODLITE_", "HOROVOD_")):
            del env[k]
    env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    if args.pythonpath:
        env["PYTHONPATH"] = args.pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra)
    cmd = [args.mpirun, "-np", str(args.np)] + MPIRUN_FLAGS
    for k in sorted(env_extra):
        cmd += ["-x", k]
    cmd += [args.python, WORKER, "--backend", "hvd", "--steps", str(steps), "--warmup", str(args.warmup),
            "--batch-size", str(args.batch_size), "--out", out]
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=args.timeout)
    if proc.returncode != 0:
        sys.exit("autotune_bench: %s failed (exit %d):\n%s" % (label, proc.returncode, proc.stdout[-4000:]))
    with open(out) as f:
        return json.load(f)


def read_log(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def main(argv):
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "autotune.csv")
        tuned = run(args, {"HOROVODLITE_AUTOTUNE": "1", "HOROVODLITE_AUTOTUNE_LOG": log,
                           "HOROVODLITE_AUTOTUNE_START": args.start}, args.tune_steps, tmp, "tuning")
        rows = read_log(log)
        if args.csv:
            with open(log) as src, open(args.csv, "w") as dst:
                dst.write(src.read())
        final = [r for r in rows if r["phase"] == "final"]
        if not final:
            sys.exit("autotune_bench: the tuning run ended before the tuner finished (%d rows): raise --tune-steps"
                     % len(rows))
        final = final[-1]
        start_env = {"HOROVODLITE_" + kv.split("=")[0]: kv.split("=")[1] for kv in args.start.split(",")}
        configs = [("poor start " + args.start, start_env),
                   ("autotuned: %s ms, %s B, eager %s B" % (final["cycle_time_ms"], final["fusion_threshold_bytes"],
                                                             final["eager_allreduce_bytes"]),
                    {"HOROVODLITE_CYCLE_TIME": final["cycle_time_ms"],
                     "HOROVODLITE_FUSION_THRESHOLD": final["fusion_threshold_bytes"],
                     "HOROVODLITE_EAGER_ALLREDUCE_BYTES": final["eager_allreduce_bytes"]})] + HAND_TUNED
        results = {label: [] for label, _ in configs}
        for _ in range(args.repeats):
            for label, env in configs:
                results[label].append(run(args, env, args.steps, tmp, label))
    grad_bytes = tuned["params"] * 4
    med = {label: statistics.median(r["samples_per_s"] for r in rs) for label, rs in results.items()}
    hand_best_label = max((label for label, _ in HAND_TUNED), key=lambda k: med[k])
    auto_label = configs[1][0]
    print("MLP (%d parameters), np %d, batch %d/rank, %d steps x %d repeats, mpirun %s" %
          (tuned["params"], args.np, args.batch_size, args.steps, args.repeats, " ".join(MPIRUN_FLAGS)))
    print("%-52s %12s" % ("configuration", "samples/s"))
    for label, _ in configs:
        print("%-52s %12.0f   (%s)" % (label, med[label], ", ".join("%.0f" % r["samples_per_s"]
                                                                    for r in results[label])))
    ratio = med[auto_label] / med[hand_best_label]
    print("autotuned / best hand-tuned (%s): %.3f" % (hand_best_label, ratio))
    print("tuner: %d samples scored, %d rows" % (sum(r["phase"] == "sample" for r in rows), len(rows)))
    if args.png:
        try:
            import matplotlib
        except ImportError:
            print("autotune_bench: no matplotlib in this Python: no plot (the CSV has every sample)")
            return 0
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        samples = [r for r in rows if r["phase"] in ("warmup", "sample")]
        xs = list(range(1, len(samples) + 1))
        scores = [float(r["score_bytes_per_s"]) / 1e6 for r in samples]
        best, best_so_far = 0.0, []
        for r, s in zip(samples, scores):
            if r["phase"] == "sample":
                best = max(best, s)
            best_so_far.append(best if best > 0 else float("nan"))
        steps_per_s = med[hand_best_label] / (args.np * args.batch_size)
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot(xs, scores, "o-", label="sample (bytes reduced / s)")
        ax.plot(xs, best_so_far, "--", label="best so far")
        ax.axhline(grad_bytes * steps_per_s / 1e6, color="k", lw=1,
                   label="best hand-tuned (%s)" % hand_best_label)
        for x, r in zip(xs, samples):
            if r["phase"] == "warmup":
                ax.axvspan(x - 0.5, x + 0.5, color="0.9")
        ax.set_xlabel("sample (grey: warmup)")
        ax.set_ylabel("MB reduced per second")
        ax.set_title("Autotune from %s: final %.0f%% of best hand-tuned" % (args.start, 100 * ratio))
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.png, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
