"""Allreduce from Python, where users call it: raw MPI_Allreduce (mpi4py, on
numpy views of the same torch tensors), horovodlite's ``hvd.allreduce``
(out of place, as Horovod's users call it; also in place and with
``Compression.fp16``) and torch.distributed with gloo, in one run under a
plain mpirun:

    mpirun -np 2 python bench/python_allreduce_bench.py --csv py_np2.csv --png py_np2.png

Each row: the median over --repeats rounds of the mean time per call of each
method (the slowest rank's), as latency and busbw = bytes/time * 2(n-1)/n.
The methods take turns within every round, in an order that rotates from
round to round (use --repeats 5 for every method in every place once), so a
machine that slows down mid-run slows every column alike.
"""
import argparse
import csv
import os
import socket
import statistics
import sys
import time

import torch

try:
    from mpi4py import MPI
except ImportError:  # pragma: no cover - the benchmark needs mpi4py for its reference column
    sys.exit("python_allreduce_bench: needs mpi4py (Debian: python3-mpi4py; pip: mpi4py)")

import horovodlite.torch as hvd

SIZES = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def iterations_for(nbytes):
    if nbytes <= 64 << 10:
        return 400
    if nbytes <= 1 << 20:
        return 60
    if nbytes <= 16 << 20:
        return 12
    return 5


def timed(comm, iters, fn):
    """Mean seconds per call over `iters` calls, the slowest rank's."""
    fn()
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    t = (time.perf_counter() - t0) / iters
    return comm.allreduce(t, op=MPI.MAX)


def init_gloo(comm):
    import torch.distributed as dist
    port = 0
    if comm.rank == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    port = comm.bcast(port, root=0)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=comm.rank,
                            world_size=comm.size)
    return dist


def measure(comm, dist, nbytes, methods, repeats, block_calls=0):
    """Per method, the seconds per call of each round. block_calls > 0: each
    method runs all its rounds of block_calls calls in one block (after
    block_calls // 10 warm-up calls), one method after the other: what a loop of
    one method sees, without the hand-over from another library's calls."""
    x = torch.full((nbytes // 4,), float(comm.rank + 1))
    out = torch.empty_like(x)
    xn, outn = x.numpy(), out.numpy()
    name = "bench.%d" % nbytes
    calls = {
        "mpi": lambda: comm.Allreduce(xn, outn, op=MPI.SUM),
        "hvl": lambda: hvd.allreduce(x, name=name, op=hvd.Sum),
        "hvl_inplace": lambda: hvd.allreduce_(x, name=name + ".inplace", op=hvd.Sum),
        "hvl_fp16": lambda: hvd.allreduce(x, name=name + ".fp16", op=hvd.Sum, compression=hvd.Compression.fp16),
    }
    if dist is not None:
        calls["gloo"] = lambda: dist.all_reduce(x)
    iters = block_calls or iterations_for(nbytes)
    results = {m: [] for m in methods}
    if block_calls:
        for m in methods:
            for _ in range(max(1, block_calls // 10)):
                calls[m]()
            for _ in range(repeats):
                if m in ("hvl_inplace", "gloo"):
                    x.fill_(float(comm.rank + 1))
                results[m].append(timed(comm, iters, calls[m]))
        return results
    for r in range(repeats):
        # The order rotates from round to round: the method that runs right
        # after MPI_Allreduce is slower at 4 KiB-1 MiB whichever it is, so no
        # method may always take that place.
        k = r % len(methods)
        for m in methods[k:] + methods[:k]:
            if m in ("hvl_inplace", "gloo"):
                x.fill_(float(comm.rank + 1))  # in-place methods grow the values; keep them finite
            results[m].append(timed(comm, iters, calls[m]))
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=SIZES,
                    help="message sizes in bytes of float32, comma-separated")
    ap.add_argument("--repeats", type=int, default=3, help="rounds; each figure is the median over rounds")
    ap.add_argument("--no-gloo", action="store_true", help="leave torch.distributed/gloo out")
    ap.add_argument("--block-calls", type=int, default=0,
                    help="run each method's rounds as one block of this many calls per round (default: the "
                         "methods take turns, a few calls each, the order rotating from round to round)")
    ap.add_argument("--csv", help="write the table as CSV")
    ap.add_argument("--png", help="plot busbw against size")
    args = ap.parse_args()

    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    n = comm.size
    hvd.init()
    dist = None if args.no_gloo else init_gloo(comm)
    factor = 2.0 * (n - 1) / n if n > 1 else 1.0

    methods = ["mpi", "hvl", "hvl_inplace", "hvl_fp16"] + ([] if dist is None else ["gloo"])
    rows = []
    for nbytes in args.sizes:
        results = measure(comm, dist, nbytes, methods, args.repeats, args.block_calls)
        row = {"np": n, "bytes": nbytes}
        for m in methods:
            t = statistics.median(results[m])
            row[m + "_us"] = t * 1e6
            row[m + "_busbw_gbs"] = nbytes / t * factor / 1e9
        rows.append(row)
        if comm.rank == 0:
            cells = "  ".join("%s %9.1f us %6.2f GB/s" % (m, row[m + "_us"], row[m + "_busbw_gbs"]) for m in methods)
            print("%9d B  %s  hvl/mpi %.2f" % (nbytes, cells, row["hvl_busbw_gbs"] / row["mpi_busbw_gbs"]),
                  flush=True)

    if comm.rank == 0:
        print("mpirun np=%d; OMPI binding policy: %s" % (n, os.environ.get("OMPI_MCA_hwloc_base_binding_policy",
                                                                          "(default)")))
        if args.csv:
            with open(args.csv, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
                w.writeheader()
                w.writerows(rows)
        if args.png:
            plot(rows, methods, n, args.png)
    if dist is not None:
        dist.destroy_process_group()
    hvd.shutdown()


def plot(rows, methods, n, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = {"mpi": "MPI_Allreduce (mpi4py)", "hvl": "hvd.allreduce", "hvl_inplace": "hvd.allreduce_",
              "hvl_fp16": "hvd.allreduce fp16 (fp32 bytes)", "gloo": "torch.distributed gloo"}
    fig, ax = plt.subplots(figsize=(8, 5))
    x = [r["bytes"] for r in rows]
    for m in methods:
        ax.plot(x, [r[m + "_busbw_gbs"] for r in rows], "o-", label=labels[m])
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes of float32)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title("allreduce from Python, np=%d, plain mpirun" % n)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print("wrote %s" % path)


if __name__ == "__main__":
    main()
