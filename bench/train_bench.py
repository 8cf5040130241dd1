#!/usr/bin/env python3
"""Python training benchmark: horovodlite.torch vs torch DDP (gloo) vs one process.

Trains the same MLP for a fixed number of steps, in sequence:
  (1) one process, (2) horovodlite at np N, (3) DDP with gloo at np N,
plus any --variant (horovodlite with other settings), and reports global
samples/s, step time, scaling efficiency = samples/s(np N) / (N * samples/s(1))
and the ratio horovodlite / DDP. Both distributed runs are started with mpirun
and the job flags of python/horovodlite/runner/mpi_flags.py (JOB_FLAGS).

    .venv/bin/python bench/train_bench.py --np 2 --steps 50 --png out.png --csv out.csv
    .venv/bin/python bench/train_bench.py --np 2 --model resnet50 --batch-size 8 --steps 10
    /usr/bin/python3 ... (Debian's torch 1.13, with PYTHONPATH=build-debian/python)
    /usr/bin/python3 bench/train_bench.py --np 2 --variant fp16:compression=fp16 \\
        --variant cycle5:HOROVODLITE_CYCLE_TIME=5 --variant noring:HOROVODLITE_RING_THRESHOLD=-1
    .venv/bin/python bench/train_bench.py --np 2 --configs hvd --variant adasum:op=adasum

horovodlite.torch must be importable: PYTHONPATH=<build>/python, or --pythonpath.
See docs/benchmarks_python.md.
"""

import argparse
import csv
import importlib.util
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "train_bench_worker.py")


def _job_flags():
    """JOB_FLAGS from the flags' one source (python/horovodlite/runner/mpi_flags.py),
    loaded by path: this driver need not have horovodlite importable."""
    path = os.path.join(HERE, os.pardir, "python", "horovodlite", "runner", "mpi_flags.py")
    spec = importlib.util.spec_from_file_location("_hvl_mpi_flags", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.JOB_FLAGS


MPI_FLAGS = _job_flags()


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2, help="ranks of the distributed runs")
    p.add_argument("--steps", type=int, default=50, help="timed steps")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--in-features", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4, help="Linear layers")
    p.add_argument("--threads-per-rank", type=int, default=1)
    p.add_argument("--model", choices=("mlp", "resnet18", "resnet50"), default="mlp",
                   help="resnet18/resnet50: bench/resnet.py (torchvision's layout) on synthetic images")
    p.add_argument("--image-size", type=int, default=64, help="resnet* only")
    p.add_argument("--repeats", type=int, default=1,
                   help="run every configuration this many times (interleaved) and report the median")
    p.add_argument("--configs", default="single,hvd,ddp",
                   help="comma-separated subset of single,hvd,ddp (variants always run)")
    p.add_argument("--variant", action="append", default=[], metavar="LABEL:K=V[,K=V...]",
                   help="an extra horovodlite run; K is compression (none|fp16), op (average|adasum) or an environment "
                        "variable, e.g. cycle5:HOROVODLITE_CYCLE_TIME=5")
    p.add_argument("--max-foreign", type=float, default=None, metavar="FRACTION",
                   help="shared machine: rerun a run (up to --tries times) when other processes used more than "
                        "this fraction of all cores while it ran; the least disturbed try is kept")
    p.add_argument("--tries", type=int, default=5)
    p.add_argument("--python", default=sys.executable, help="interpreter of the workers")
    p.add_argument("--pythonpath", default=None,
                   help="where horovodlite is (default: $PYTHONPATH, else <repo>/build/python)")
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--mpi-flags", default=None, metavar="FLAGS",
                   help="mpirun flags of the distributed runs instead of '%s'; '' for a plain mpirun "
                        "(Open MPI then binds each rank to a core when np <= 2)" % " ".join(MPI_FLAGS))
    p.add_argument("--timeout", type=float, default=300, help="seconds per run")
    p.add_argument("--png", default=None, help="write a bar chart")
    p.add_argument("--csv", default=None, help="write the table as CSV")
    p.add_argument("--json", default=None, help="write every run's raw result as JSON")
    p.add_argument("--summarize-timeline", default=None, metavar="FILE",
                   help="only print the mean duration of each phase in a HOROVODLITE_TIMELINE file, and exit")
    args = p.parse_args(argv)
    args.configs = [c for c in args.configs.split(",") if c]
    for c in args.configs:
        if c not in ("single", "hvd", "ddp"):
            p.error("unknown config %r" % c)
    if args.np < 1 or args.repeats < 1:
        p.error("--np and --repeats must be >= 1")
    args.variants = [parse_variant(p, v) for v in args.variant]
    return args


def parse_variant(p, text):
    label, sep, rest = text.partition(":")
    if not sep or not label:
        p.error("--variant wants LABEL:K=V[,K=V...], got %r" % text)
    compression, op, env = "none", "average", {}
    for kv in filter(None, rest.split(",")):
        k, eq, v = kv.partition("=")
        if not eq:
            p.error("--variant %r: %r is not K=V" % (text, kv))
        if k == "compression":
            if v not in ("none", "fp16"):
                p.error("--variant %r: compression is none or fp16" % text)
            compression = v
        elif k == "op":
            if v not in ("average", "adasum"):
                p.error("--variant %r: op is average or adasum" % text)
            op = v
        else:
            env[k] = v
    return {"label": label, "backend": "hvd", "compression": compression, "op": op, "env": env}


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_pythonpath():
    if os.environ.get("PYTHONPATH"):
        return os.environ["PYTHONPATH"]
    cand = os.path.join(os.path.dirname(HERE), "build", "python")
    return cand if os.path.isdir(cand) else ""


def busy_cpu_seconds():
    """CPU seconds all cores spent busy since boot (/proc/stat), or None."""
    try:
        with open("/proc/stat") as f:
            vals = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)  # idle + iowait
    return (sum(vals[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def worker_args(args, cfg, out):
    return [WORKER, "--backend", cfg["backend"], "--steps", str(args.steps), "--warmup", str(args.warmup),
            "--batch-size", str(args.batch_size), "--in-features", str(args.in_features),
            "--hidden", str(args.hidden), "--layers", str(args.layers),
            "--threads-per-rank", str(args.threads_per_rank), "--compression", cfg["compression"],
            "--op", cfg.get("op", "average"), "--model", args.model, "--image-size", str(args.image_size), "--out", out]


def run_one(args, cfg, tmpdir, idx):
    out = os.path.join(tmpdir, "result_%s.json" % idx)
    env = dict(os.environ)
    # Keep every library to the requested threads (torch.set_num_threads does the rest).
    # OpenBLAS (Debian's torch) starts its own threads unless told.
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[k] = str(args.threads_per_rank)
    env["PYTHONPATH"] = args.pythonpath
    env.update(cfg["env"])
    if cfg["backend"] == "single":
        cmd = [args.python] + worker_args(args, cfg, out)
    else:
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
        exports = ["OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONPATH"] + sorted(cfg["env"])
        if cfg["backend"] == "ddp":
            env["MASTER_ADDR"] = "127.0.0.1"
            env["MASTER_PORT"] = str(free_port())
            env.setdefault("GLOO_SOCKET_IFNAME", "lo")
            exports += ["MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME"]
        cmd = [args.mpirun, "-np", str(args.np)] + (MPI_FLAGS if args.mpi_flags is None else args.mpi_flags.split())
        for k in exports:
            cmd += ["-x", k]
        cmd += [args.python] + worker_args(args, cfg, out)
    print("[%s] %s" % (cfg["label"], " ".join(
        ["%s=%s" % kv for kv in sorted(cfg["env"].items())] + cmd)), flush=True)
    busy0, ours0, t0 = busy_cpu_seconds(), children_cpu_seconds(), time.time()
    proc = subprocess.run(cmd, env=env, timeout=args.timeout, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    busy1, ours1, wall = busy_cpu_seconds(), children_cpu_seconds(), time.time() - t0
    if proc.returncode != 0 or not os.path.exists(out):
        sys.stderr.write(proc.stdout)
        raise RuntimeError("configuration %s failed (exit %d)" % (cfg["label"], proc.returncode))
    with open(out) as f:
        res = json.load(f)
    res["label"] = cfg["label"]
    # The share of all cores that other processes used during the whole run
    # (start-up included): a measure of how disturbed it was.
    res["foreign_load"] = (None if busy0 is None else
                           max(0.0, (busy1 - busy0) - (ours1 - ours0)) / (wall * (os.cpu_count() or 1)))
    print("    %.1f samples/s, %.2f ms/step, param max diff %g, foreign load %s" %
          (res["samples_per_s"], res["step_ms"], res["param_max_diff"],
           "-" if res["foreign_load"] is None else "%.0f %%" % (100 * res["foreign_load"])), flush=True)
    return res


def run_quiet(args, cfg, tmpdir, idx):
    """run_one, retried while other processes disturbed it (see --max-foreign)."""
    best = None
    for attempt in range(args.tries if args.max_foreign is not None else 1):
        res = run_one(args, cfg, tmpdir, "%d_%d" % (idx, attempt))
        if best is None or (res["foreign_load"] or 0) < (best["foreign_load"] or 0):
            best = res
        if args.max_foreign is None or res["foreign_load"] is None or res["foreign_load"] <= args.max_foreign:
            break
        time.sleep(5)
    return best


def summarize(runs):
    """The median run (by samples/s) of each label."""
    rows = []
    for _label, rs in runs.items():
        rs = sorted(rs, key=lambda r: r["samples_per_s"])
        row = dict(rs[len(rs) // 2])
        row["samples_per_s_all"] = [round(r["samples_per_s"], 1) for r in rs]
        row["samples_per_s_median"] = statistics.median(r["samples_per_s"] for r in rs)
        rows.append(row)
    single = next((r for r in rows if r["backend"] == "single"), None)
    ddp = next((r for r in rows if r["backend"] == "ddp"), None)
    for r in rows:
        sps = r["samples_per_s_median"]
        r["efficiency"] = sps / (r["np"] * single["samples_per_s_median"]) if single else None
        r["vs_ddp"] = sps / ddp["samples_per_s_median"] if ddp and r["backend"] != "single" else None
        r["params_equal"] = r["param_max_diff"] == 0.0
    return rows


COLUMNS = [("config", "label"), ("np", "np"), ("samples/s", "samples_per_s_median"),
           ("step ms", "step_ms"), ("fwd ms", "fwd_ms"), ("bwd ms", "bwd_ms"), ("opt.step ms", "opt_step_ms"),
           ("cpu main ms", "main_cpu_ms"), ("cpu other ms", "other_cpu_ms"),
           ("faults/step", "page_faults_per_step"),
           ("efficiency", "efficiency"), ("vs DDP", "vs_ddp"), ("param diff", "param_max_diff"),
           ("foreign load", "foreign_load")]


def fmt(key, v):
    if v is None:
        return "-"
    if key == "efficiency":
        return "%.1f %%" % (100 * v)
    if key == "vs_ddp":
        return "%.2fx" % v
    if key == "foreign_load":
        return "%.0f %%" % (100 * v)
    if key == "param_max_diff":
        return "%.3g" % v
    if key == "page_faults_per_step":
        return "%.0f" % v
    if isinstance(v, float):
        return "%.1f" % v if key == "samples_per_s_median" else "%.2f" % v
    return str(v)


def print_table(rows):
    cells = [[h for h, _ in COLUMNS]] + [[fmt(k, r.get(k)) for _, k in COLUMNS] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    for j, line in enumerate(cells):
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths))))
        if j == 0:
            print("  ".join("-" * w for w in widths))


def write_csv(path, rows):
    keys = ["label", "backend", "np", "threads_per_rank", "batch_size_per_rank", "steps", "params",
            "samples_per_s_median", "samples_per_s_all", "step_ms", "fwd_ms", "bwd_ms", "opt_step_ms",
            "main_cpu_ms", "other_cpu_ms", "page_faults_per_step", "efficiency", "vs_ddp", "param_max_diff",
            "foreign_load", "compression", "env"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(keys)
        for r in rows:
            w.writerow([json.dumps(r[k]) if isinstance(r.get(k), (list, dict)) else r.get(k) for k in keys])


def write_png(path, rows, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colors = {"single": "#888888", "hvd": "#1f77b4", "ddp": "#ff7f0e"}
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(rows) + 2), 4.5))
    xs = range(len(rows))
    vals = [r["samples_per_s_median"] for r in rows]
    bars = ax.bar(xs, vals, color=[colors[r["backend"]] for r in rows])
    for b, r in zip(bars, rows):
        notes = []
        if r["efficiency"] is not None and r["backend"] != "single":
            notes.append("eff %.0f%%" % (100 * r["efficiency"]))
        if r["vs_ddp"] is not None and r["backend"] != "ddp":
            notes.append("%.2fx DDP" % r["vs_ddp"])
        ax.annotate("\n".join(notes), (b.get_x() + b.get_width() / 2, b.get_height()),
                    ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(["%s\n(np %d)" % (r["label"], r["np"]) for r in rows], fontsize=8)
    ax.set_ylabel("samples/s (global)")
    ax.set_ylim(0, 1.2 * max(vals))
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summarize_timeline(path, skip_first=1):
    """Mean duration (ms) of each timeline phase, per tensor name, over all its
    operations but the first `skip_first` (warm-up: buffer allocation)."""
    with open(path) as f:
        text = f.read().rstrip().rstrip(",")
    events = json.loads(text if text.endswith("]") else text + "]")
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    seen, phases = {}, {}
    for e in events:
        if e.get("ph") != "X" or e.get("pid") not in names:
            continue
        tensor = names[e["pid"]]
        if e["name"].startswith("NEGOTIATE_"):
            seen[tensor] = seen.get(tensor, 0) + 1
        if seen.get(tensor, 0) <= skip_first:
            continue
        phases.setdefault(tensor, {}).setdefault(e["name"], []).append(e["dur"] / 1e3)
    order = ["NEGOTIATE_ALLREDUCE", "QUEUE", "MEMCPY_IN_FUSION_BUFFER", "RING_ALLREDUCE", "MPI_ALLREDUCE",
             "MEMCPY_OUT_FUSION_BUFFER", "ALLREDUCE"]
    print("mean ms per operation (count) from %s, first %d of each name skipped" % (path, skip_first))
    print("%-24s %s" % ("tensor", "  ".join("%s" % o for o in order)))
    for tensor in sorted(phases):
        ph = phases[tensor]
        if "ALLREDUCE" not in ph:
            continue
        print("%-24s %s" % (tensor, "  ".join(
            ("%.2f (%d)" % (statistics.mean(ph[o]), len(ph[o]))).rjust(len(o)) if o in ph else "-".rjust(len(o))
            for o in order)))


def main(argv):
    args = parse_args(argv)
    if args.summarize_timeline:
        summarize_timeline(args.summarize_timeline)
        return 0
    args.pythonpath = args.pythonpath if args.pythonpath is not None else default_pythonpath()
    if not shutil.which(args.mpirun) and args.np > 1:
        raise SystemExit("mpirun not found: %s" % args.mpirun)
    configs = []
    if "single" in args.configs:
        configs.append({"label": "single", "backend": "single", "compression": "none", "env": {}})
    if "hvd" in args.configs:
        configs.append({"label": "horovodlite", "backend": "hvd", "compression": "none", "env": {}})
    if "ddp" in args.configs:
        configs.append({"label": "ddp-gloo", "backend": "ddp", "compression": "none", "env": {}})
    configs += args.variants

    runs = {c["label"]: [] for c in configs}
    with tempfile.TemporaryDirectory(prefix="train_bench_") as tmpdir:
        idx = 0
        for _rep in range(args.repeats):
            for cfg in configs:
                runs[cfg["label"]].append(run_quiet(args, cfg, tmpdir, idx))
                idx += 1
    rows = summarize(runs)

    r0 = rows[0]
    model = ("MLP %d x %d" % (args.layers, args.hidden) if args.model == "mlp"
             else "%s (%s) on %dx%d images" % (args.model, r0.get("model_source", "?"), args.image_size,
                                                 args.image_size))
    title = ("%s (%.2fM params, %.1f MB grads), batch %d/rank, %d steps, %d thread(s)/rank, np %d, torch %s"
             % (model, r0["params"] / 1e6, r0["grad_mbytes"], args.batch_size, args.steps,
                args.threads_per_rank, args.np, r0.get("torch", "?")))
    print()
    print(title)
    try:
        print("load average: %.2f %.2f %.2f" % os.getloadavg())
    except OSError:
        pass
    print_table(rows)
    bad = [r["label"] for r in rows if not r["params_equal"]]
    if bad:
        print("WARNING: parameters differ across ranks in: %s" % ", ".join(bad))
    else:
        print("parameters identical on all ranks in every configuration")
    if args.csv:
        write_csv(args.csv, rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)
    if args.png:
        write_png(args.png, rows, title)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
