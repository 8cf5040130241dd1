#!/usr/bin/env python3
"""Start-up and step time of horovodlite under the launchers PyTorch jobs use,
against plain torch.distributed (gloo) under the same launcher in the same run.

Start-up: from the launcher's start (this script's clock, just before it runs
the launcher) to the first 4-byte allreduce done on every rank (the largest
over the ranks): hvd.init() + hvd.allreduce, or init_process_group("gloo") +
dist.all_reduce. Step: the median time of a step of an MLP (--hidden, --layers)
with SGD, hvd.DistributedOptimizer or DDP (gloo), after --warmup steps.

    PYTHONPATH=build/python .venv/bin/python bench/launch_bench.py --np 2 --repeats 5

Launchers: torchrun (--standalone); with --with-mpirun, Open MPI's plain
mpirun and horovodlite-run --gloo (hvd only: torch.distributed has no
rendezvous of theirs); with --with-slurm, srun on a one-node Slurm that the
benchmark starts (tests/python/slurm/slurm_cluster.py; root).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)


def worker(args):
    t_launch = float(os.environ["HVL_BENCH_T0"])
    import torch
    torch.set_num_threads(1)
    if args.worker == "hvd":
        import horovodlite.torch as hvd
        hvd.init()
        hvd.allreduce(torch.ones(1), name="first")
        rank, size = hvd.rank(), hvd.size()
    else:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        dist.all_reduce(torch.ones(1))
        rank, size = dist.get_rank(), dist.get_world_size()
    started = time.time() - t_launch
    torch.manual_seed(0)
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if args.worker == "hvd":
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    else:
        model = torch.nn.parallel.DistributedDataParallel(model)
    x = torch.randn(args.batch, args.hidden)
    times = []
    for step in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    with open(os.path.join(args.out, "%s.%d.json" % (args.worker, rank)), "w") as f:
        json.dump({"started_s": started, "step_ms": 1000 * statistics.median(times), "size": size}, f)
    if args.worker == "hvd":
        hvd.shutdown()
    else:
        dist.destroy_process_group()


def launch(launcher, who, args, out):
    worker_argv = [HERE, "--worker", who, "--out", out, "--hidden", str(args.hidden), "--layers",
                   str(args.layers), "--batch", str(args.batch), "--steps", str(args.steps), "--warmup",
                   str(args.warmup)]
    if launcher == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(args.np),
               *worker_argv]
    elif launcher == "mpirun":
        cmd = ["mpirun", "-np", str(args.np), "--oversubscribe", sys.executable, *worker_argv]
    elif launcher == "horovodlite-run":
        cmd = [sys.executable, "-m", "horovodlite.run", "--gloo", "-np", str(args.np), sys.executable, *worker_argv]
    else:
        cmd = ["srun", "-n", str(args.np), sys.executable, *worker_argv]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_MCA", "HOROVOD"))}
    if launcher == "srun":
        env = args.slurm.env(env)
    env.update(OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env["HVL_BENCH_T0"] = repr(time.time())
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    runs = [json.load(open(os.path.join(out, "%s.%d.json" % (who, r)))) for r in range(args.np)]
    return max(r["started_s"] for r in runs), max(r["step_ms"] for r in runs)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worker", choices=("hvd", "torch"))
    p.add_argument("--out")
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--with-mpirun", action="store_true")
    p.add_argument("--with-slurm", action="store_true")
    args = p.parse_args()
    if args.worker:
        return worker(args)
    cases = [("torchrun", "hvd"), ("torchrun", "torch")]
    if args.with_mpirun:
        cases += [("mpirun", "hvd"), ("horovodlite-run", "hvd")]
    if args.with_slurm:
        sys.path.insert(0, os.path.join(os.path.dirname(HERE), os.pardir, "tests", "python", "slurm"))
        from slurm_cluster import SlurmCluster
        with SlurmCluster() as args.slurm:
            return report(args, cases + [("srun", "hvd")])
    return report(args, cases)


def report(args, cases):
    results = {c: [] for c in cases}
    for _ in range(args.repeats):
        for case in cases:  # interleaved: drift hits every case alike
            with tempfile.TemporaryDirectory() as out:
                results[case].append(launch(*case, args, out))
    print("np %d, MLP %d x %d, batch %d, %d repeats (median [min-max])" % (args.np, args.layers, args.hidden,
                                                                          args.batch, args.repeats))
    print("%-16s %-6s %-26s %-26s" % ("launcher", "lib", "launch->1st allreduce s", "step ms"))
    for (launcher, who), runs in results.items():
        s = [r[0] for r in runs]
        ms = [r[1] for r in runs]
        print("%-16s %-6s %5.2f [%4.2f-%4.2f]%10s %6.1f [%5.1f-%5.1f]" % (
            launcher, who, statistics.median(s), min(s), max(s), "", statistics.median(ms), min(ms), max(ms)))


if __name__ == "__main__":
    sys.exit(main())
