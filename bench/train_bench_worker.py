"""One configuration of the Python training benchmark (started by train_bench.py).

Trains the same MLP for a fixed number of steps with one of three backends:

    single  one process, no communication
    hvd     horovodlite.torch: hvd.DistributedOptimizer (default fusion), run under mpirun
    ddp     torch.nn.parallel.DistributedDataParallel with gloo (default 25 MB buckets),
            run under mpirun: RANK / WORLD_SIZE come from OMPI_COMM_WORLD_RANK / _SIZE

Every rank uses the same model initialisation, the same per-rank batch size and
synthetic data drawn from a rank-dependent seed. Warmup steps are not timed.
After the run every rank compares its parameters with rank 0's; rank 0 writes a
JSON result to --out.
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=("single", "hvd", "ddp"), required=True)
    p.add_argument("--model", choices=("mlp", "resnet18", "resnet50"), default="mlp",
                   help="resnet*: bench/resnet.py on --image-size images (--in-features/--hidden/--layers unused)")
    p.add_argument("--image-size", type=int, default=64, help="resnet* only: square input images")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--in-features", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4, help="number of Linear layers (>= 2)")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--threads-per-rank", type=int, default=1)
    p.add_argument("--compression", choices=("none", "fp16"), default="none", help="hvd only")
    p.add_argument("--op", choices=("average", "adasum"), default="average",
                   help="hvd only: the DistributedOptimizer's op (adasum: combines the local steps' updates)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--out", required=True, help="JSON result file (written by rank 0)")
    args = p.parse_args(argv)
    if args.layers < 2 or args.steps < 1 or args.warmup < 0 or args.batch_size < 1:
        p.error("need --layers >= 2, --steps >= 1, --warmup >= 0, --batch-size >= 1")
    return args


def make_model(args):
    if args.model == "mlp":
        return make_mlp(args)
    # torchvision's own model where torchvision imports (Debian's python3-torchvision
    # beside Debian's torch); bench/resnet.py, the same layout, where it does not
    # (PyPI's torchvision does not import beside the torch 2.13.0 CPU wheel).
    try:
        import torchvision.models
        return getattr(torchvision.models, args.model)(num_classes=args.classes)
    except Exception:  # noqa: BLE001 - any import failure means "no usable torchvision"
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import resnet
        return getattr(resnet, args.model)(num_classes=args.classes)


def model_source(args):
    if args.model == "mlp":
        return "mlp"
    try:
        import torchvision.models  # noqa: F401
        return "torchvision " + __import__("torchvision").__version__
    except Exception:  # noqa: BLE001
        return "bench/resnet.py"


def make_mlp(args):
    dims = [args.in_features] + [args.hidden] * (args.layers - 1) + [args.classes]
    mods = []
    for i in range(len(dims) - 1):
        mods.append(nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2:
            mods.append(nn.ReLU())
    return nn.Sequential(*mods)


class Comm:
    """The few collectives the harness needs, for each backend."""

    def __init__(self, backend):
        self.backend = backend
        self.rank, self.size = 0, 1
        if backend == "hvd":
            import horovodlite.torch as hvd
            hvd.init()
            self.hvd = hvd
            self.rank, self.size = hvd.rank(), hvd.size()
        elif backend == "ddp":
            import torch.distributed as dist
            if not dist.is_gloo_available():
                raise RuntimeError("this torch has no gloo backend")
            self.rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "0")))
            self.size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            if "MASTER_PORT" not in os.environ:
                raise RuntimeError("MASTER_PORT must be set for --backend ddp")
            dist.init_process_group("gloo", rank=self.rank, world_size=self.size)
            self.dist = dist

    def barrier(self):
        if self.backend == "hvd":
            self.hvd.barrier()
        elif self.backend == "ddp":
            self.dist.barrier()

    def broadcast_(self, t):
        if self.backend == "hvd":
            self.hvd.broadcast_(t, root_rank=0, name="bench.check")
        elif self.backend == "ddp":
            self.dist.broadcast(t, src=0)
        return t

    def max_over_ranks(self, values):
        """Element-wise max of a list of floats over ranks."""
        t = torch.tensor(values, dtype=torch.float64)
        if self.backend == "hvd":
            t = self.hvd.allreduce(t, op=self.hvd.Max, name="bench.max")
        elif self.backend == "ddp":
            self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return t.tolist()

    def shutdown(self):
        if self.backend == "hvd":
            self.hvd.shutdown()
        elif self.backend == "ddp":
            # destroy_process_group() sometimes hung on rank 0 (the TCPStore host)
            # after rank 1 had exited (torch 1.13, gloo); the results are written
            # by now, so leave after a last barrier without tearing gloo down.
            self.dist.barrier()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)


def thread_cpu_seconds():
    """{tid: user+system CPU seconds} of this process's threads (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open("/proc/self/task/%s/stat" % tid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended meanwhile
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return out


def cpu_split(before, after):
    """(main thread, other threads) CPU seconds between two snapshots."""
    main_tid = os.getpid()
    main = after.get(main_tid, 0.0) - before.get(main_tid, 0.0)
    other = sum(v - before.get(t, 0.0) for t, v in after.items() if t != main_tid)
    return main, other


def main(argv):
    args = parse_args(argv)
    torch.set_num_threads(args.threads_per_rank)
    comm = Comm(args.backend)

    torch.manual_seed(args.seed)  # the same initial model everywhere
    model = make_model(args)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if args.backend == "hvd":
        hvd = comm.hvd
        compression = hvd.Compression.fp16 if args.compression == "fp16" else hvd.Compression.none
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        op = hvd.Adasum if args.op == "adasum" else hvd.Average
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), compression=compression,
                                       op=op)
        net = model
    elif args.backend == "ddp":
        net = nn.parallel.DistributedDataParallel(model)  # default bucket_cap_mb=25
    else:
        net = model

    # Synthetic data: a few batches per rank, from a rank-dependent seed.
    gen = torch.Generator().manual_seed(args.seed + 1 + comm.rank)
    n_batches = 4
    shape = (args.in_features,) if args.model == "mlp" else (3, args.image_size, args.image_size)
    xs = [torch.randn(args.batch_size, *shape, generator=gen) for _ in range(n_batches)]
    ys = [torch.randint(0, args.classes, (args.batch_size,), generator=gen) for _ in range(n_batches)]
    loss_fn = nn.CrossEntropyLoss()

    fwd, bwd, stp, tot = [], [], [], []
    loss = None
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            comm.barrier()
            cpu_before = thread_cpu_seconds()
            faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t_start = time.perf_counter()
        x, y = xs[step % n_batches], ys[step % n_batches]
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = loss_fn(net(x), y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        if step >= args.warmup:
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
            stp.append(t3 - t2)
            tot.append(t3 - t0)
    comm.barrier()
    elapsed = time.perf_counter() - t_start
    main_cpu, other_cpu = cpu_split(cpu_before, thread_cpu_seconds())
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before
    elapsed, fwd_m, bwd_m, stp_m, main_cpu, other_cpu, faults = comm.max_over_ranks(
        [elapsed, statistics.mean(fwd), statistics.mean(bwd), statistics.mean(stp), main_cpu, other_cpu, faults])

    # Cheap consistency check: every rank's parameters against rank 0's.
    with torch.no_grad():
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        ref = comm.broadcast_(flat.clone())
        local_diff = (flat - ref).abs().max().item()
    max_diff = comm.max_over_ranks([local_diff])[0]

    result = {
        "backend": args.backend,
        "model": args.model,
        "model_source": model_source(args),
        "torch": torch.__version__,
        "np": comm.size,
        "threads_per_rank": args.threads_per_rank,
        "batch_size_per_rank": args.batch_size,
        "steps": args.steps,
        "warmup": args.warmup,
        "params": n_params,
        "grad_mbytes": n_params * 4 / 1e6,
        "elapsed_s": elapsed,
        "step_ms": 1e3 * elapsed / args.steps,
        "step_ms_median_rank0": 1e3 * statistics.median(tot),
        "fwd_ms": 1e3 * fwd_m,
        "bwd_ms": 1e3 * bwd_m,
        "opt_step_ms": 1e3 * stp_m,
        # CPU seconds per timed step (max over ranks): the training thread, and
        # all other threads of the process (communication: horovodlite's
        # background thread and MPI's, or gloo's).
        "main_cpu_ms": 1e3 * main_cpu / args.steps,
        "other_cpu_ms": 1e3 * other_cpu / args.steps,
        "page_faults_per_step": faults / args.steps,  # minor faults, max over ranks
        "samples_per_s": comm.size * args.batch_size * args.steps / elapsed,
        "final_loss": float(loss.item()),
        "param_max_diff": max_diff,
        "compression": args.compression,
        "op": args.op,
        "env": {k: v for k, v in os.environ.items() if k.startswith("HOROVODLITE_")},
    }
    if comm.rank == 0:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    comm.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
