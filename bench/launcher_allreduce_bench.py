"""hvd.allreduce (out of place, as users call it) at 1-64 MiB float32, in a job
started by either launcher, to compare the Gloo transport with MPI (issue 25's
target: a Gloo job within 10 % of the MPI job):

    mpirun -np 2 python bench/launcher_allreduce_bench.py
    python -m horovodlite.run --gloo -np 2 python bench/launcher_allreduce_bench.py

Rank 0 prints one line per size: the transport, the median and min over
--repeats rounds of the mean time per call (each round --iters calls), and the
bus bandwidth of the median (bytes/time * 2(n-1)/n). --sizes picks the sizes
(bytes, comma-separated); by default a round is 2 x 64 MiB of calls, at most 200.
"""
import argparse
import statistics
import time

import horovodlite.torch as hvd
import torch

SIZES = [1 << 20, 4 << 20, 16 << 20, 64 << 20]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--iters", type=int, default=0, help="calls per round (0: by size)")
    p.add_argument("--sizes", default=",".join(str(s) for s in SIZES), help="bytes, comma-separated")
    args = p.parse_args()
    hvd.init()
    n = hvd.size()
    kind = "gloo" if hvd.gloo_enabled() else "mpi"
    for nbytes in [int(x) for x in args.sizes.split(",")]:
        x = torch.ones(nbytes // 4)
        iters = args.iters or min(200, max(3, (64 << 20) // nbytes * 2))
        for _ in range(2):
            hvd.allreduce(x, name="bench.%d" % nbytes)  # warm-up (negotiation cache, buffers)
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            for _ in range(iters):
                hvd.allreduce(x, name="bench.%d" % nbytes)
            mine = (time.perf_counter() - t0) / iters
            times.append(max(hvd.allgather_object(mine)))  # the slowest rank's
        if hvd.rank() == 0:
            med = statistics.median(times)
            busbw = nbytes / med * 2 * (n - 1) / n / 1e9
            print("%-4s np=%d %8.1f KiB  median %8.3f ms  min %8.3f ms  busbw %6.2f GB/s" % (
                kind, n, nbytes / 1024, med * 1e3, min(times) * 1e3, busbw), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
