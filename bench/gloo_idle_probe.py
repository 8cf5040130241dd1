"""CPU a rank burns while idle after hvd.init(), and 100 back-to-back 4 KB
allreduces (wall and CPU each): the core's control path on Gloo vs MPI.

    source ci/env.sh; export PYTHONPATH=build/python
    build/horovodlite-run --gloo -np 2 .venv/bin/python bench/gloo_idle_probe.py
    mpirun -np 2 $HVL_MPIRUN_JOB_FLAGS $HVL_MPIRUN_EXCLUSIONS .venv/bin/python bench/gloo_idle_probe.py

(the mpirun flags from ci/env.sh, which reads them from runner/mpi_flags.py).
"""

import time

import horovodlite.torch as hvd
import torch

hvd.init()
hvd.allreduce(torch.ones(1), name="warm")
c0 = time.process_time()
time.sleep(3)
idle = (time.process_time() - c0) / 3 * 1e3
c0, t0 = time.process_time(), time.perf_counter()
for _ in range(100):
    hvd.allreduce(torch.ones(1000), name="a")
print("rank %d %s: idle CPU %.1f ms/s; 100 allreduces of 4 KB: %.2f ms wall, %.2f ms CPU each" % (
    hvd.rank(), "gloo" if hvd.gloo_enabled() else "mpi", idle, (time.perf_counter() - t0) * 10,
    (time.process_time() - c0) * 10), flush=True)
