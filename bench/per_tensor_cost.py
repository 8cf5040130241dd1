"""Per-tensor cost (issue 29): 200 tensors of 4 KiB per round, hvd.allreduce_async_
then hvd.synchronize each, under mpirun:

    source ci/env.sh
    PYTHONPATH=build/python mpirun -np 2 .venv/bin/python bench/per_tensor_cost.py [ROUNDS]

Prints (rank 0, after 5 untimed rounds) the CPU time per round of both ranks
together (user + system, every thread: mean), the median time of the 200
enqueues and of the whole round (the slowest rank's), the fastest and slowest
round, and the background thread's cycles per round (median). The values are
checked after the last round. bench/optimizer_cost_bench.py --worker tensors
times the same round beside gloo and one MPI_Allreduce.
"""
import resource
import statistics
import sys
import time

import horovodlite.torch as hvd
import torch
from horovodlite.torch import _C
from mpi4py import MPI


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main():
    torch.set_num_threads(1)
    hvd.init()
    comm = MPI.COMM_WORLD
    n = 200
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    tensors = [torch.ones(1024) for _ in range(n)]
    names = ["cost.%d" % i for i in range(n)]
    enqueue, total, cycles, cpu = [], [], [], []
    for r in range(rounds + 5):
        for t in tensors:
            t.fill_(1.0)
        comm.Barrier()
        s0 = _C.stats()["cycles"]
        c0 = cpu_seconds()
        t0 = time.perf_counter()
        handles = [hvd.allreduce_async_(t, name=nm, op=hvd.Sum) for t, nm in zip(tensors, names)]
        t1 = time.perf_counter()
        for h in handles:
            hvd.synchronize(h)
        t2 = time.perf_counter()
        c1 = cpu_seconds()
        if r >= 5:
            enqueue.append(comm.allreduce(t1 - t0, op=MPI.MAX))
            total.append(comm.allreduce(t2 - t0, op=MPI.MAX))
            cycles.append(_C.stats()["cycles"] - s0)
            cpu.append(comm.allreduce(c1 - c0))
    expected = torch.full((1024,), float(comm.size))
    if not all(torch.equal(t, expected) for t in tensors):
        sys.exit("per_tensor_cost: wrong results")
    if comm.rank == 0:
        print("cpu(both ranks) %.3f ms/round mean  enqueue %.3f ms  round %.3f ms (min %.3f max %.3f)  "
              "cycles/round %.1f" % (statistics.mean(cpu) * 1e3, statistics.median(enqueue) * 1e3,
                                     statistics.median(total) * 1e3, min(total) * 1e3, max(total) * 1e3,
                                     statistics.median(cycles)))
    hvd.shutdown()


if __name__ == "__main__":
    main()
