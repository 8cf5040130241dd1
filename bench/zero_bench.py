#!/usr/bin/env python3
"""Memory and step time of sharded optimizers: horovodlite's replicated
DistributedOptimizer, hvd.ZeroRedundancyOptimizer (stages 1 and 2) and torch's
ZeroRedundancyOptimizer under DDP (gloo), on the same MLP with Adam, each in
its own mpirun job (plain job flags: runner/mpi_flags.py's JOB_FLAGS).

Peak memory added by training, per rank: VmHWM after the timed steps minus
VmRSS once the model is built (the high-water mark is reset through
/proc/self/clear_refs first), the largest over the ranks.

    .venv/bin/python bench/zero_bench.py --np 4 --hidden 3872 --layers 4 --steps 5

horovodlite.torch must be importable (PYTHONPATH=build/python).
"""

import argparse
import importlib.util
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ("replicated", "zero1", "zero2", "fsdp3", "torch_zero_ddp", "torch_fsdp2")


def _job_flags():
    path = os.path.join(HERE, os.pardir, "python", "horovodlite", "runner", "mpi_flags.py")
    spec = importlib.util.spec_from_file_location("_hvl_mpi_flags", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.JOB_FLAGS


def _kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field)


def worker(args):
    import torch
    torch.set_num_threads(1)
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    if args.mode.startswith("torch_"):
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % args.port, rank=rank, world_size=size)
    else:
        import horovodlite.torch as hvd
        hvd.init()
    torch.manual_seed(0)
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1])
    n_params = sum(p.numel() for p in model.parameters())
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch_size, args.hidden, generator=g)
    y = torch.randn(args.batch_size, args.hidden, generator=g)
    import torch._dynamo  # noqa: F401  (the hooks' eager() imports it: a fixed cost, not training's)
    base = _kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    if args.mode == "replicated":
        opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=1e-4),
                                       named_parameters=model.named_parameters())
        net = model
    elif args.mode in ("zero1", "zero2"):
        opt = hvd.ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam,
                                          stage=int(args.mode[-1]), lr=1e-4)
        net = model
    elif args.mode == "fsdp3":
        for m in model:
            if isinstance(m, torch.nn.Linear):
                hvd.fully_shard(m)
        net = hvd.fully_shard(model)
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    elif args.mode == "torch_fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (size,))
        for m in model:
            if isinstance(m, torch.nn.Linear):
                fully_shard(m, mesh=mesh)
        net = fully_shard(model, mesh=mesh)
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    else:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        net = torch.nn.parallel.DistributedDataParallel(model)
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-4)
    times = []
    for _ in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - t0)
    peak = _kib("VmHWM")
    result = {"rank": rank, "added_mib": (peak - base) / 1024.0, "base_mib": base / 1024.0,
              "step_ms": 1000 * statistics.median(times[args.warmup:]), "params": n_params,
              "loss": float(loss)}
    with open(os.path.join(args.out, "rank%d.json" % rank), "w") as f:
        json.dump(result, f)
    if args.mode.startswith("torch_"):
        import torch.distributed as dist
        dist.destroy_process_group()
    else:
        hvd.shutdown()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def driver(args):
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.update(kv.split("=", 1) for kv in args.export)
    rows = {}
    out_dir = tempfile.mkdtemp(prefix="zero-bench-")
    for mode in args.modes:
        for name in os.listdir(out_dir):
            os.unlink(os.path.join(out_dir, name))
        cmd = (["mpirun", "-np", str(args.np)] + _job_flags() +
               [sys.executable, os.path.abspath(__file__), "--worker", "--mode", mode, "--port", str(free_port()),
                "--hidden", str(args.hidden), "--layers", str(args.layers), "--batch-size", str(args.batch_size),
                "--steps", str(args.steps), "--warmup", str(args.warmup), "--out", out_dir])
        out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=args.timeout)
        results = []
        for name in sorted(os.listdir(out_dir)):
            with open(os.path.join(out_dir, name)) as f:
                results.append(json.load(f))
        if out.returncode != 0 or len(results) != args.np:
            print(out.stdout[-4000:])
            raise SystemExit("%s: mpirun exited %d" % (mode, out.returncode))
        rows[mode] = {"added_mib": max(r["added_mib"] for r in results),
                      "step_ms": max(r["step_ms"] for r in results), "params": results[0]["params"]}
    print("np %d, MLP %d x %d (%d parameters, %.0f MB float32), Adam, batch %d per rank, median of %d steps"
          % (args.np, args.layers, args.hidden, rows[args.modes[0]]["params"],
             rows[args.modes[0]]["params"] * 4 / 1e6, args.batch_size, args.steps))
    print("mpirun -np %d %s%s" % (args.np, " ".join(_job_flags()), "".join(" -x " + kv for kv in args.export)))
    print("%-16s %14s %10s %12s %12s" % ("mode", "added MiB/rank", "step ms", "mem/replic", "mem/torchZ"))
    for mode, r in rows.items():
        rep = rows.get("replicated", {}).get("added_mib")
        tz = rows.get("torch_zero_ddp", {}).get("added_mib")
        print("%-16s %14.0f %10.1f %12s %12s" % (mode, r["added_mib"], r["step_ms"],
                                                  "%.2f" % (r["added_mib"] / rep) if rep else "-",
                                                  "%.2f" % (r["added_mib"] / tz) if tz else "-"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=4)
    p.add_argument("--hidden", type=int, default=3872)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    p.add_argument("--timeout", type=int, default=1200)
    p.add_argument("--json", help="write the table's figures here")
    p.add_argument("-x", dest="export", action="append", default=[], metavar="VAR=VALUE",
                   help="an environment variable for every rank of every mode (e.g. MALLOC_MMAP_THRESHOLD_=4194304)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mode", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    worker(args) if args.worker else driver(args)


if __name__ == "__main__":
    main()
