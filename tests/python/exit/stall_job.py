"""A rank stuck in its own code (run by test_stall_exit.py under mpirun, 3 ranks).

After 30 allreduces the last rank sleeps for 600 s (a data-loader deadlock)
while the others wait in ``hvd.allreduce(t, name="grad.stalled")``. The stall
shutdown raises HorovodInternalError on them; then, by ``sys.argv[1]``:

- ``propagate``: the exception ends the script (exit code 1);
- ``catch``: the script catches it, prints it and ends normally.

Either way the whole job must end, non-zero, soon after.
"""

import sys
import time

import horovodlite.torch as hvd
import torch

hvd.init()
t = torch.ones(1000)
for step in range(30):
    hvd.allreduce(t, name="grad.%d" % (step % 4))
if hvd.rank() == hvd.size() - 1:
    print("FAILING_AT %.3f rank %d sleeps in its own code" % (time.time(), hvd.rank()), file=sys.stderr,
          flush=True)
    time.sleep(600)
    sys.exit(0)
if sys.argv[1] == "propagate":
    hvd.allreduce(t, name="grad.stalled")
else:
    try:
        hvd.allreduce(t, name="grad.stalled")
    except hvd.HorovodInternalError as e:
        print("ERROR_AT %.3f rank %d: %s" % (time.time(), hvd.rank(), e), file=sys.stderr, flush=True)
