"""horovodlite against torch.distributed (NCCL) on CUDA tensors, in one run
(issue 29's table). Each rank uses the GPU of its local rank:

    mpirun -np 1 python bench/gpu_allreduce_bench.py            # one GPU
    mpirun -np 2 --bind-to none python bench/gpu_allreduce_bench.py

Rows (the median over --repeats rounds of the slowest rank's mean per call or
per round; the two methods alternate within every round):

    4 KiB, synchronised each call    hvd.allreduce(x) (out of place) vs
                                     dist.all_reduce(x) + torch.cuda.synchronize()
    200 x 4 KiB allreduce_async_     200 hvd.allreduce_async_ + hvd.synchronize each, per round,
                                     vs 200 dist.all_reduce(async_op=True) + wait, per round
    64 MiB out of place              hvd.allreduce(x) vs y = x.clone(); dist.all_reduce(y)

torch.distributed is initialised with NCCL from the rank/size that mpirun
gives (MASTER_ADDR/MASTER_PORT: 127.0.0.1 and --port). Exits with a clear
message where there is no GPU.
"""
import argparse
import os
import statistics
import sys
import time

import horovodlite.torch as hvd
import torch


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5, help="rounds per row (median reported)")
    p.add_argument("--port", type=int, default=29531, help="torch.distributed's rendezvous port on 127.0.0.1")
    p.add_argument("--iterations", type=int, default=200, help="calls per round for the 4 KiB row")
    return p.parse_args()


def sync():
    torch.cuda.synchronize()


def slowest(seconds):
    """The slowest rank's time (every rank reports the same)."""
    t = torch.tensor([seconds], dtype=torch.float64)
    return hvd.allreduce(t, op=hvd.Max, name="bench.slowest").item()


def time_it(fn, n):
    hvd.barrier()
    sync()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    sync()
    return slowest((time.perf_counter() - start) / n)


def main():
    args = parse_args()
    hvd.init()
    if not torch.cuda.is_available():
        sys.exit("gpu_allreduce_bench: this PyTorch sees no CUDA device (torch.cuda.is_available() is False); "
                 "run it on a machine with a GPU and a PyTorch with CUDA")
    if not hvd.cuda_built():
        sys.exit("gpu_allreduce_bench: horovodlite was built without CUDA (configure with -DHVL_WITH_CUDA=ON)")
    import torch.distributed as dist
    torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
    dev = torch.device("cuda", torch.cuda.current_device())
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    dist.init_process_group("nccl", rank=hvd.rank(), world_size=hvd.size(), device_id=dev)

    small = torch.ones(1024, device=dev)  # 4 KiB
    many = [torch.ones(1024, device=dev) for _ in range(200)]
    big = torch.ones(16 << 20, device=dev)  # 64 MiB

    def hvd_small():
        hvd.allreduce(small, op=hvd.Sum, name="bench.small")
        sync()

    def torch_small():
        dist.all_reduce(small)
        sync()

    def hvd_round():
        hs = [hvd.allreduce_async_(t, op=hvd.Sum, name="bench.many.%d" % i) for i, t in enumerate(many)]
        for h in hs:
            hvd.synchronize(h)

    def torch_round():
        works = [dist.all_reduce(t, async_op=True) for t in many]
        for w in works:
            w.wait()

    def hvd_big():
        hvd.allreduce(big, op=hvd.Sum, name="bench.big")

    def torch_big():
        y = big.clone()
        dist.all_reduce(y)

    rows = [("4 KiB, synchronised each call", hvd_small, torch_small, args.iterations, 1e6, "us"),
            ("200 x 4 KiB allreduce_async_ + synchronize, per round", hvd_round, torch_round, 20, 1e3, "ms"),
            ("64 MiB out of place", hvd_big, torch_big, 20, 1e3, "ms")]
    for _, a, b, _, _, _ in rows:  # warm up: NCCL communicators, caches, the fusion buffer
        for _ in range(3):
            a()
            b()
    sync()
    results = []
    for label, a, b, n, scale, unit in rows:
        ta, tb = [], []
        for k in range(args.repeats):
            for which in ((a, ta), (b, tb)) if k % 2 == 0 else ((b, tb), (a, ta)):
                which[1].append(time_it(which[0], n) * scale)
        results.append((label, statistics.median(ta), min(ta), max(ta), statistics.median(tb), unit))
    if hvd.rank() == 0:
        name = torch.cuda.get_device_name(dev)
        print("horovodlite vs torch.distributed NCCL: %d rank(s), %s, torch %s, NCCL %s, HOROVODLITE_GPU_OPERATIONS=%s"
              % (hvd.size(), name, torch.__version__, ".".join(map(str, torch.cuda.nccl.version())),
                 os.environ.get("HOROVODLITE_GPU_OPERATIONS", "nccl")))
        print("| | horovodlite `hvd.allreduce` | torch.distributed NCCL | ratio |")
        print("|---|---|---|---|")
        for label, med, lo, hi, ref, unit in results:
            print("| %s | %.3g %s (%.3g-%.3g) | %.3g %s | %.2fx |" % (label, med, unit, lo, hi, ref, unit, med / ref))
    dist.destroy_process_group()
    hvd.shutdown()


if __name__ == "__main__":
    main()
