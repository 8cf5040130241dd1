#!/usr/bin/env python3
"""Training step time inside the engines vs mpirun (issue #27's 10 % target).

The same function (step_fn below: an MLP with hvd.DistributedOptimizer, one
intra-op thread per rank) runs at --np ranks under each launcher; every step is
timed inside the function after --warmup untimed steps and each rank reports the
median of --steps: wall time; the process's CPU time per step (all its
threads: the training thread and horovodlite's background thread), which a
loaded machine disturbs less than the wall time; and the time inside opt.step()
(waiting for the last gradients' allreduces, then SGD). Rank 0 also reports its
background thread's cycles per step. Launchers, one fresh process tree per run, interleaved in
rounds (the order rotates each round), with the 1-minute load average read
before and after every run:

    mpirun   mpirun -np N <mpi_flags.JOB_FLAGS + EXCLUSIONS> python THIS --worker
    gloo     build/horovodlite-run --gloo -np N python THIS --worker
    spark    python THIS --engine spark   (SparkSession local[N], horovodlite.spark.run)
    ray      python THIS --engine ray     (ray.init(num_cpus=N), RayExecutor(num_workers=N))

For spark and ray the start-up overhead (the call -> step_fn running on every
rank) is reported too.

    source ci/env.sh
    PYTHONPATH=build/python .venv/bin/python bench/engine_step_bench.py --rounds 3 --out /tmp/steps.jsonl
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LAUNCHERS = ("mpirun", "gloo", "spark", "ray")


def step_fn(steps, warmup, batch, hidden, seed=0):
    """Runs on every rank; returns this rank's step times (ms) and when it started."""
    t_enter = time.time()
    import horovodlite.torch as hvd
    import torch
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(784, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden),
                                torch.nn.ReLU(), torch.nn.Linear(hidden, 10))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    g = torch.Generator().manual_seed(seed + hvd.rank())
    x = torch.randn(batch, 784, generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)
    from horovodlite.torch import _C
    times, cpu, in_step = [], [], []
    for step in range(warmup + steps):
        if step == warmup:
            cycles0 = _C.stats()["cycles"]
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        t1 = time.perf_counter()
        opt.step()  # waits for the gradients' allreduces still in flight, then SGD
        if step >= warmup:
            t2 = time.perf_counter()
            times.append((t2 - t0) * 1e3)
            in_step.append((t2 - t1) * 1e3)
            cpu.append((time.process_time() - c0) * 1e3)
    return {"rank": hvd.rank(), "size": hvd.size(), "t_enter": t_enter, "median_ms": statistics.median(times),
            "cpu_ms": statistics.median(cpu), "step_call_ms": statistics.median(in_step),
            "cycles_per_step": (_C.stats()["cycles"] - cycles0) / steps,
            "controller": "gloo" if hvd.gloo_enabled() else "mpi"}


def _mpi_flags():
    sys.path.insert(0, os.path.join(ROOT, "python"))
    from horovodlite.runner import mpi_flags
    return mpi_flags.JOB_FLAGS + mpi_flags.EXCLUSIONS


def _fn_kwargs(args):
    return {"steps": args.steps, "warmup": args.warmup, "batch": args.batch, "hidden": args.hidden}


def run_worker(args):
    """Under mpirun / horovodlite-run: rank 0 prints every rank's result."""
    r = step_fn(**_fn_kwargs(args))
    import horovodlite.torch as hvd
    results = hvd.allgather_object(r)
    if r["rank"] == 0:
        print("RESULT " + json.dumps({"ranks": results}), flush=True)


def run_engine(args):
    import cloudpickle
    this = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(this)
    out = {}
    if args.engine == "spark":
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        import horovodlite.spark
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master("local[%d]" % args.np).appName("hvl-step-bench")
                 .config("spark.ui.showConsoleProgress", "false").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        t_call = time.time()
        results = horovodlite.spark.run(step_fn, kwargs=_fn_kwargs(args), num_proc=args.np, verbose=0)
        spark.stop()
    else:
        import ray
        from horovodlite.ray import RayExecutor
        ray.init(num_cpus=args.np, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}})
        from ray import cloudpickle as ray_cloudpickle
        ray_cloudpickle.register_pickle_by_value(this)
        t_call = time.time()
        ex = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=args.np)
        ex.start()
        results = ex.run(step_fn, kwargs=_fn_kwargs(args))
        ex.shutdown()
        ray.shutdown()
    out["ranks"] = results
    out["startup_s"] = max(r["t_enter"] for r in results) - t_call
    print("RESULT " + json.dumps(out), flush=True)


def command(launcher, args):
    me = [sys.executable, os.path.abspath(__file__), "--np", str(args.np), "--steps", str(args.steps),
          "--warmup", str(args.warmup), "--batch", str(args.batch), "--hidden", str(args.hidden)]
    if launcher == "mpirun":
        return ["mpirun", "-np", str(args.np)] + _mpi_flags() + me + ["--worker"]
    if launcher == "gloo":
        return [os.path.join(ROOT, "build", "horovodlite-run"), "--gloo", "-np", str(args.np)] + me + ["--worker"]
    return me + ["--engine", launcher]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--steps", type=int, default=60, help="timed steps (the median is reported)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--launchers", default=",".join(LAUNCHERS))
    p.add_argument("--out", default=None, help="append one JSON line per run")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--engine", choices=("spark", "ray"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return run_worker(args)
    if args.engine:
        return run_engine(args)
    launchers = args.launchers.split(",")
    rows = []
    for rnd in range(args.rounds):
        order = launchers[rnd % len(launchers):] + launchers[:rnd % len(launchers)]
        for launcher in order:
            cmd = command(launcher, args)
            load0 = os.getloadavg()[0]
            t = time.time()
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
            load1 = os.getloadavg()[0]
            line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if proc.returncode != 0 or not line:
                print("%s failed (rc %d):\n%s" % (launcher, proc.returncode, proc.stdout[-3000:]), file=sys.stderr)
                continue
            res = json.loads(line[-1][len("RESULT "):])
            ranks = sorted(res["ranks"], key=lambda r: r["rank"])
            row = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "round": rnd, "launcher": launcher,
                   "median_ms": [r["median_ms"] for r in ranks], "cpu_ms": [r["cpu_ms"] for r in ranks],
                   "step_call_ms": [r["step_call_ms"] for r in ranks],
                   "cycles_per_step": ranks[0]["cycles_per_step"],
                   "controller": ranks[0]["controller"], "startup_s": res.get("startup_s"),
                   "wall_s": time.time() - t, "load1_before": load0, "load1_after": load1,
                   "command": " ".join(cmd)}
            rows.append(row)
            print("%-6s round %d: step median %s ms (in opt.step() %s; %.1f cycles), CPU %s ms (%s)%s, "
                  "load %.2f -> %.2f" % (
                launcher, rnd, " ".join("%.2f" % m for m in row["median_ms"]),
                " ".join("%.2f" % m for m in row["step_call_ms"]), row["cycles_per_step"],
                " ".join("%.2f" % m for m in row["cpu_ms"]), row["controller"],
                "" if row["startup_s"] is None else ", start-up %.2f s" % row["startup_s"], load0, load1),
                flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")
    print("\nsummary (median over rounds of the max over ranks of each rank's median step, wall and CPU):")
    for launcher in launchers:
        mine = [r for r in rows if r["launcher"] == launcher]
        if not mine:
            continue
        step = statistics.median(max(r["median_ms"]) for r in mine)
        cpu = statistics.median(max(r["cpu_ms"]) for r in mine)
        loads = [r["load1_before"] for r in mine]
        start = [r["startup_s"] for r in mine if r["startup_s"] is not None]
        print("%-6s %7.2f ms  CPU %6.2f ms  (runs %d, load1 %.1f-%.1f)%s" % (
            launcher, step, cpu, len(mine), min(loads), max(loads),
            "  start-up median %.2f s" % statistics.median(start) if start else ""))


if __name__ == "__main__":
    main()
