#!/usr/bin/env python3
"""The optimizer's own costs (issue 19), in one run, under plain mpirun (no flags):

1. Per-tensor overhead: every round, 200 float32 tensors of 4 KiB each are
   started with ``hvd.allreduce_async_(t, name=...)`` and then synchronized one
   by one (the path DistributedOptimizer's hooks and step() take); beside it
   torch.distributed/gloo (``dist.all_reduce(t, async_op=True)`` then
   ``wait()``) and, for reference, one MPI_Allreduce of all 800 KiB at once.
   Reported as ms per round and us per tensor (median over rounds, the slowest
   rank's).
2. Gradient memory: a 25M-parameter MLP (100 MB of float32 gradients), SGD
   with momentum, --steps steps, each configuration in its own processes:
   horovodlite's DistributedOptimizer (also with fp16 compression), DDP/gloo
   with and without gradient_as_bucket_view, and one process. Reported: rank 0's
   peak RSS (MiB, ru_maxrss at the end) and minor page faults per step after
   the first step; the ranks' parameters are compared after the run.
   ``--malloc-keep`` runs every configuration with glibc's
   MALLOC_MMAP_THRESHOLD_=32 MiB and MALLOC_TRIM_THRESHOLD_=4 GiB: freed
   gradient and activation blocks then stay in the process instead of going
   back to the system at every step (with the defaults, torch's per-step
   allocations of 25 MB blocks fault in anew every step, in one process too).

The C++ side (LibTorch adapter, C++ DistributedOptimizer) is
bench/optimizer_cost_bench.cc (build/bench/optimizer_cost_bench).

    PYTHONPATH=build/python .venv/bin/python bench/optimizer_cost_bench.py --np 2 [--malloc-keep]
    mpirun -np 2 /usr/bin/python3 bench/optimizer_cost_bench.py --worker tensors   # part 1 only

The driver starts every worker with ``mpirun -np N`` and nothing else (Open MPI
binds each rank to a core when N <= 2), as users start jobs.
"""

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
MEMORY_CONFIGS = ["single", "hvd", "hvd_fp16", "ddp", "ddp_bucket_view"]


# ------------------------------------------------------------------ workers ----

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_tensors(args):
    """Part 1: per-tensor cost of horovodlite, gloo and (reference) one MPI call."""
    import horovodlite.torch as hvd
    import torch.distributed as dist
    from mpi4py import MPI
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    hvd.init()
    port = comm.bcast(free_port() if comm.rank == 0 else 0, root=0)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=comm.rank,
                            world_size=comm.size)
    n, count = args.tensors, args.tensor_bytes // 4
    tensors = [torch.ones(count) for _ in range(n)]
    names = ["cost.%d" % i for i in range(n)]
    flat = torch.ones(n * count)
    flat_out = torch.empty_like(flat)

    from horovodlite.torch import _C
    cycles, collectives = [], []

    def hvl_round():
        handles = [hvd.allreduce_async_(t, name=nm, op=hvd.Sum) for t, nm in zip(tensors, names)]
        for h in handles:
            hvd.synchronize(h)

    def gloo_round():
        works = [dist.all_reduce(t, async_op=True) for t in tensors]
        for w in works:
            w.wait()

    def mpi_round():
        comm.Allreduce(flat.numpy(), flat_out.numpy(), op=MPI.SUM)

    methods = {"hvl": hvl_round, "gloo": gloo_round, "mpi_one_call": mpi_round}
    times = {m: [] for m in methods}
    for fn in methods.values():  # warm up: negotiation caches, connections
        for _ in range(3):
            fn()
    # Each method's rounds run as one block. Interleaved rounds measured gloo's
    # after-effects, not horovodlite or MPI: after a gloo round, the next rounds of
    # the others ran slower (under a plain mpirun, where each rank and its
    # threads share one core).
    for m, fn in methods.items():
        for _ in range(args.rounds):
            for t in tensors:
                t.fill_(1.0)  # keep values finite (Sum doubles them)
            comm.Barrier()
            s0 = _C.stats()
            t0 = time.perf_counter()
            fn()
            times[m].append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
            if m == "hvl":
                s1 = _C.stats()
                cycles.append(s1["cycles"] - s0["cycles"])
                collectives.append(s1["responses_executed"] - s0["responses_executed"])
    # Correctness of the last horovodlite round: 1 * size on every element.
    hvl_round_check = [torch.ones(count) for _ in range(n)]
    hs = [hvd.allreduce_async_(t, name="check.%d" % i, op=hvd.Sum) for i, t in enumerate(hvl_round_check)]
    ok = all(torch.equal(hvd.synchronize(h), torch.full((count,), float(comm.size))) for h in hs)
    result = {"np": comm.size, "tensors": n, "tensor_bytes": args.tensor_bytes, "results_correct": ok,
              "hvl_cycles_per_round": statistics.median(cycles),
              "hvl_collectives_per_round": statistics.median(collectives)}
    for m, ts in times.items():
        med = statistics.median(ts)
        result[m + "_ms_per_round"] = med * 1e3
        result[m + "_us_per_tensor"] = med * 1e6 / n
        result[m + "_ms_spread"] = [min(ts) * 1e3, max(ts) * 1e3]
    dist.destroy_process_group()
    hvd.shutdown()
    if comm.rank == 0:
        print(json.dumps(result))
        if args.out:
            with open(args.out, "w") as f:
                json.dump(result, f)


def make_mlp(params):
    """An MLP of about `params` parameters: 4 square Linear layers."""
    import torch.nn as nn
    width = int((params / 4) ** 0.5)
    layers = []
    for i in range(4):
        layers.append(nn.Linear(width, width))
        if i < 3:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers), width


def worker_memory(args):
    """Part 2: one configuration's peak RSS and page faults per step (rank 0)."""
    config = args.config
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    model, width = make_mlp(args.params)
    rank, size = 0, 1
    hvd = dist = None
    if config.startswith("hvd"):
        import horovodlite.torch as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
    elif config.startswith("ddp"):
        import torch.distributed as dist
        rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
        size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%s" % args.port, rank=rank, world_size=size)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if hvd is not None:
        compression = hvd.Compression.fp16 if config == "hvd_fp16" else hvd.Compression.none
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), compression=compression)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        net = model
    elif dist is not None:
        from torch.nn.parallel import DistributedDataParallel as DDP
        net = DDP(model, gradient_as_bucket_view=(config == "ddp_bucket_view"))
    else:
        net = model
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(args.batch, width, generator=g)
    y = torch.randn(args.batch, width, generator=g)
    faults, times = [], []
    for _ in range(args.steps):
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = ((net(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    # The ranks must agree (a data-parallel step gives every rank the same model).
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    same = True
    if hvd is not None:
        same = bool(torch.equal(hvd.broadcast(flat, 0, name="check.params"), flat))
    elif dist is not None:
        ref = flat.clone()
        dist.broadcast(ref, 0)
        same = bool(torch.equal(ref, flat))
    grad_is_plain = all(p.grad is None or (type(p.grad) is torch.Tensor and p.grad.grad_fn is None)
                        for p in model.parameters())
    if rank == 0:
        result = {"config": config, "np": size, "params": sum(p.numel() for p in model.parameters()),
                  "peak_rss_mib": peak_mib, "faults_per_step": statistics.median(faults[1:] or faults),
                  "step_ms": statistics.median(times[1:] or times) * 1e3, "ranks_agree": same,
                  "grad_is_plain_tensor": grad_is_plain}
        with open(args.out, "w") as f:
            json.dump(result, f)
    if hvd is not None:
        hvd.shutdown()
    if dist is not None:
        dist.destroy_process_group()


# ------------------------------------------------------------------- driver ----

def run(cmd, env):
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout)
        raise SystemExit("optimizer_cost_bench: %s failed (exit %d)" % (" ".join(cmd), proc.returncode))
    return proc.stdout


def driver(args):
    env = dict(os.environ)
    if "PYTHONPATH" not in env:
        env["PYTHONPATH"] = os.path.join(os.path.dirname(HERE), "build", "python")
    env.setdefault("OMP_NUM_THREADS", "1")
    if args.malloc_keep:
        env["MALLOC_MMAP_THRESHOLD_"] = str(32 << 20)
        env["MALLOC_TRIM_THRESHOLD_"] = str(4 << 30)
    me = os.path.abspath(__file__)
    mpirun = ["mpirun", "-np", str(args.np)]
    tmp = tempfile.mkdtemp(prefix="hvl_optcost_")
    out = os.path.join(tmp, "tensors.json")
    results = {}
    if not args.skip_tensors:
        run(mpirun + [sys.executable, me, "--worker", "tensors", "--rounds", str(args.rounds), "--out", out], env)
        with open(out) as f:
            results["tensors"] = json.load(f)
        t = results["tensors"]
        print("per-tensor, np=%d, %d tensors of %d B per round (median of %d rounds):"
              % (t["np"], t["tensors"], t["tensor_bytes"], args.rounds))
        for m in ("hvl", "gloo", "mpi_one_call"):
            print("  %-13s %7.3f ms/round  %6.2f us/tensor  (rounds %.3f-%.3f ms)"
                  % (m, t[m + "_ms_per_round"], t[m + "_us_per_tensor"], *t[m + "_ms_spread"]))
        print("  horovodlite: %g background cycles and %g collectives per round (medians); results correct: %s"
              % (t["hvl_cycles_per_round"], t["hvl_collectives_per_round"], t["results_correct"]))
    memory = []
    for config in args.configs.split(","):
        out = os.path.join(tmp, config + ".json")
        cmd = [sys.executable, me, "--worker", "memory", "--config", config, "--steps", str(args.steps),
               "--params", str(args.params), "--batch", str(args.batch), "--port", str(free_port()), "--out", out]
        run(cmd if config == "single" else mpirun + cmd, env)
        with open(out) as f:
            memory.append(json.load(f))
    if memory:
        print("gradient memory: %d-parameter MLP, SGD momentum, %d steps, rank 0%s:"
              % (memory[0]["params"], args.steps, " (--malloc-keep)" if args.malloc_keep else ""))
        for m in memory:
            print("  %-16s np=%d  peak RSS %7.1f MiB  page faults/step %7.0f  step %8.1f ms  ranks agree %s  "
                  "p.grad plain %s" % (m["config"], m["np"], m["peak_rss_mib"], m["faults_per_step"], m["step_ms"],
                                       m["ranks_agree"], m["grad_is_plain_tensor"]))
    results["memory"] = memory
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--rounds", type=int, default=30, help="per-tensor rounds (median reported)")
    p.add_argument("--tensors", type=int, default=200)
    p.add_argument("--tensor-bytes", type=int, default=4096)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--params", type=int, default=25_000_000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--configs", default=",".join(MEMORY_CONFIGS))
    p.add_argument("--skip-tensors", action="store_true")
    p.add_argument("--malloc-keep", action="store_true",
                   help="glibc keeps freed memory (MALLOC_MMAP_THRESHOLD_=32 MiB, MALLOC_TRIM_THRESHOLD_=4 GiB)")
    p.add_argument("--json", help="write all results as JSON")
    p.add_argument("--worker", choices=("tensors", "memory"), help=argparse.SUPPRESS)
    p.add_argument("--config", help=argparse.SUPPRESS)
    p.add_argument("--port", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker == "tensors":
        worker_tensors(args)
    elif args.worker == "memory":
        worker_memory(args)
    else:
        driver(args)


if __name__ == "__main__":
    main()
