# Initialises horovodlite, runs an allreduce and leaves without shutdown():
# Python's and the C++ runtime's exit handlers shut it down. Run under
# mpirun by static_runtime_test.sh with a module linked with -static-libstdc++.
import horovodlite.torch as hvd
import torch

hvd.init()
x = torch.full((1000,), float(hvd.rank() + 1))
y = hvd.allreduce(x, op=hvd.Sum, name="exit.x")
expected = float(sum(range(1, hvd.size() + 1)))
assert torch.all(y == expected), (hvd.rank(), y[:4])
h = hvd.allreduce_async_(torch.ones(8), name="exit.async")
hvd.synchronize(h)
print("rank %d: allreduce ok, exiting without shutdown()" % hvd.rank(), flush=True)
