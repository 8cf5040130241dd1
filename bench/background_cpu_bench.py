"""The background thread's CPU and cycles per simulated training step (issue 29),
under mpirun:

    source ci/env.sh
    PYTHONPATH=build/python mpirun -np 2 .venv/bin/python bench/background_cpu_bench.py [STEPS]

A step: a 200 ms "forward pass" (a sleep), then 62 gradients (ResNet-18's
sizes, rounded: 4 KiB to 2.25 MiB, 46 MB in all) enqueued with
hvd.allreduce_async_ in groups of 8, 10 ms apart (the "backward pass"), then
synchronize on each. Sleeps stand in for compute, so that what the process's
threads other than the main one spend (horovodlite's background thread) is
measured apart from the training. Prints rank 0's CPU per step of the other
threads and of the main thread, the background cycles per step and the wall
time per step, over STEPS (default 10) steps after two untimed ones.
"""
import resource
import sys
import time

import horovodlite.torch as hvd
import torch
from horovodlite.torch import _C

SIZES = [4096, 65536, 589824, 2359296] * 15 + [512000, 4000]


def main():
    torch.set_num_threads(1)
    hvd.init()
    grads = [torch.ones(n // 4) for n in SIZES]
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10

    def step():
        time.sleep(0.2)
        handles = []
        for i, g in enumerate(grads):
            handles.append(hvd.allreduce_async_(g, name="g.%d" % i, op=hvd.Average))
            if i % 8 == 7:
                time.sleep(0.01)
        for h in handles:
            hvd.synchronize(h)

    step()
    step()
    c0 = _C.stats()["cycles"]
    u0 = resource.getrusage(resource.RUSAGE_SELF)
    m0, w0 = time.thread_time(), time.perf_counter()
    for _ in range(steps):
        step()
    u1 = resource.getrusage(resource.RUSAGE_SELF)
    m1, w1 = time.thread_time(), time.perf_counter()
    other = (u1.ru_utime + u1.ru_stime - u0.ru_utime - u0.ru_stime) - (m1 - m0)
    if hvd.rank() == 0:
        print("rank0: other threads %.1f ms CPU/step, main %.1f ms/step, cycles/step %.0f, wall %.0f ms/step"
              % (other * 1e3 / steps, (m1 - m0) * 1e3 / steps, (_C.stats()["cycles"] - c0) / steps,
                 (w1 - w0) * 1e3 / steps))
    hvd.shutdown()


if __name__ == "__main__":
    main()
