"""Adasum against Sum from Python, where users call it: hvd.allreduce of one
float32 tensor (64 MiB by default; --dtype float16 or bfloat16), out of place, op Sum and op Adasum in
alternating rounds so that both see the same machine load (the Python twin of
bench/adasum_bench.cc; issue 28's target: Adasum >= 0.8x the speed of Sum at
np 2 and 4):

    mpirun -np 2 python bench/adasum_python_bench.py [--bytes N] [--rounds R] [--dtype D]

Each round times one call of each op after a barrier; a call's time is the
slowest rank's. Rank 0 prints the median and min of each op and the ratio of
the medians. The input is the user's tensor (PyTorch's allocator); the result
comes from the adapter's pool (output_pool.h).
"""
import argparse
import time

import horovodlite.torch as hvd
import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bytes", type=int, default=64 << 20)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32")
    args = p.parse_args()
    hvd.init()
    torch.manual_seed(hvd.rank() + 1)
    dtype = getattr(torch, args.dtype)
    x = torch.randn(args.bytes // torch.empty(0, dtype=dtype).element_size()).to(dtype)
    ops = (("sum", hvd.Sum), ("adasum", hvd.Adasum))
    times = {name: [] for name, _ in ops}

    def once(name, op):
        hvd.barrier()
        t0 = time.perf_counter()
        hvd.allreduce(x, op=op, name="bench." + name)
        t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        return hvd.allreduce(t, op=hvd.Max, name="bench.time").item()

    for name, op in ops:  # warm-up: buffers, the pool's storages, caches
        once(name, op)
    for _ in range(args.rounds):
        for name, op in ops:
            times[name].append(once(name, op))
    if hvd.rank() == 0:
        med = {}
        print(f"# adasum_python_bench: np={hvd.size()}, {args.bytes / (1 << 20):.1f} MiB {args.dtype}, "
              f"{args.rounds} rounds of each (alternating), median of the slowest rank")
        for name, _ in ops:
            t = sorted(times[name])
            med[name] = t[len(t) // 2]
            print(f"{name:6s} {med[name] * 1e3:9.2f} ms  (min {t[0] * 1e3:.2f})")
        print(f"adasum speed / sum speed = {med['sum'] / med['adasum']:.2f}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
