#!/usr/bin/env python3
"""Allgather across ranks: hvd.allgather (float32, every rank the same rows) against
MPI_Allgather through mpi4py on the same buffers, in one run (``--no-mpi``:
horovodlite only). Reports, per output size, the time per call and the bus
bandwidth (output bytes * (n-1)/n / time). Meant for the simulated hosts
(docs/multihost.md), e.g. flat against hierarchical:

    H="tests/multihost/run_on_hosts.sh 2 2 2gbit --"
    HOROVODLITE_HIERARCHICAL_ALLGATHER=0 $H .venv/bin/python bench/allgather_bench.py --no-mpi
    HOROVODLITE_HIERARCHICAL_ALLGATHER=1 $H .venv/bin/python bench/allgather_bench.py --no-mpi
"""
import argparse
import statistics
import time

import horovodlite.torch as hvd
import torch
from mpi4py import MPI


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")],
                    default=[1 << 20, 4 << 20, 16 << 20, 64 << 20], help="output bytes, comma-separated")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--no-mpi", action="store_true",
                    help="horovodlite only (mpi4py's collectives from the main thread run beside horovodlite's "
                         "background thread; over TCP that pair has stalled Open MPI: docs/multihost.md)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    hvd.init()
    n = comm.size
    for nbytes in args.sizes:
        rows = max(1, nbytes // 4 // n // 256)
        x = torch.full((rows, 256), float(comm.rank))
        out = torch.empty((rows * n, 256))
        calls = {"hvl": lambda x=x, nbytes=nbytes: hvd.allgather(x, name="ag.%d" % nbytes)}
        if not args.no_mpi:
            calls["mpi"] = lambda x=x, out=out: comm.Allgather(x.numpy(), out.numpy())
        times = {m: [] for m in calls}
        for r in range(args.repeats):
            for m, fn in (list(calls.items()) if r % 2 == 0 else list(calls.items())[::-1]):
                fn()
                comm.Barrier()
                t0 = time.perf_counter()
                for _ in range(args.iters):
                    fn()
                times[m].append(comm.allreduce((time.perf_counter() - t0) / args.iters, op=MPI.MAX))
        got = hvd.allgather(x, name="ag.check.%d" % nbytes)
        ok = all(torch.equal(got[k * rows:(k + 1) * rows], torch.full((rows, 256), float(k))) for k in range(n))
        if comm.rank == 0:
            total = rows * n * 256 * 4
            cells = []
            for m, ts in times.items():
                t = statistics.median(ts)
                cells.append("%s %9.1f us %6.3f GB/s" % (m, t * 1e6, total * (n - 1) / n / t / 1e9))
            ratio = ("  hvl/mpi %.2f" % (statistics.median(times["mpi"]) / statistics.median(times["hvl"]))
                     if "mpi" in times else "")
            print("%10d B  %s%s  correct %s" % (total, "  ".join(cells), ratio, ok), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
