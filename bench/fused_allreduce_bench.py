"""A fused allreduce from Python: hvd.grouped_allreduce of many tensors below
the 1 MiB at which a tensor runs alone (by default 128 x 512 KiB float32 =
64 MiB), so that every call packs them into the fusion buffer, reduces that
buffer and unpacks it, as DistributedOptimizer does with a model's small
gradients. Sum and Adasum in turn:

    mpirun -np 2 python bench/fused_allreduce_bench.py [--tensors 128] [--bytes 524288] [--rounds 21]

Rank 0 prints, per op, the median and min over --rounds calls of the slowest
rank's time, and how much of its memory is on transparent huge pages
(AnonHugePages, /proc/self/smaps_rollup): the fusion buffer is there when the
kernel allows it (docs/results/2026-11-performance.md, "Huge pages").
"""
import argparse
import time

import horovodlite.torch as hvd
import torch


def huge_kib():
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1])
    return -1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tensors", type=int, default=128)
    p.add_argument("--bytes", type=int, default=512 << 10, help="bytes per tensor (float32)")
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--ops", default="sum,adasum", help="comma-separated: sum, adasum")
    args = p.parse_args()
    hvd.init()
    tensors = [torch.randn(args.bytes // 4) for _ in range(args.tensors)]
    ops = {"sum": hvd.Sum, "adasum": hvd.Adasum}
    total_mib = args.tensors * (args.bytes // 4) * 4 / (1 << 20)
    for name in args.ops.split(","):
        times = []
        for _ in range(args.rounds + 1):  # the first call is a warm-up
            hvd.barrier()
            t0 = time.perf_counter()
            hvd.grouped_allreduce(tensors, op=ops[name], name="fused." + name)
            t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            times.append(hvd.allreduce(t, op=hvd.Max, name="fused.time").item())
        times = sorted(times[1:])
        if hvd.rank() == 0:
            print(f"np {hvd.size()} {name:6s} {args.tensors} x {args.bytes >> 10} KiB ({total_mib:.0f} MiB): "
                  f"median {times[len(times) // 2] * 1e3:.2f} ms, min {times[0] * 1e3:.2f} ms; "
                  f"rank 0 on huge pages: {huge_kib()} KiB", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
