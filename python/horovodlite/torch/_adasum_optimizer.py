"""DistributedOptimizer(..., op=hvd.Adasum), as Horovod's _DistributedAdasumOptimizer.

With Adasum the ranks combine *updates*, not gradients (Horovod's
docs/adasum_user_guide): when a parameter's gradient is ready, the wrapped
optimizer steps that parameter alone, locally; the update (the new value minus
the value before the step) is combined across ranks with the Adasum allreduce
(the core's ReduceOp Adasum, ops/adasum.h), and step() sets the parameter to
its value before the local step plus the combined update.

As in Horovod:

- The local step runs inside the gradient hooks, during backward, so the
  Adasum allreduce of the updates overlaps the rest of backward. Parameters
  whose gradient never became ready are stepped and sent at step().
  Unlike Horovod, which calls the wrapped optimizer's step() once per
  parameter (about 60 us of Python each, whatever the parameter's size), the
  hooks collect the ready parameters and step them together: once
  _BATCH_PARAMS of them, or _BATCH_BYTES of values, are ready (and at step()).
  Each parameter is stepped exactly once either way, with its own gradient and
  state, so per-parameter optimizers (SGD, Adam, ...) give the same values.
- ``backward_passes_per_step``: gradients accumulate over that many backward
  passes before the local step (which sees the accumulated gradient).
- ``compression``: the update is compressed (Compression.fp16 / .bf16: reduced
  as float16 / bfloat16, Adasum's dot products still in double) and decompressed before it
  is applied.
- No learning-rate scaling happens here. Horovod's guide: with Adasum do not
  scale the learning rate by the number of ranks (on CPU); scripts written for
  Horovod (``lr * hvd.size()`` unless Adasum) therefore keep working unchanged.
- ``gradient_predivide_factor`` is refused (it needs op=Average), and so are
  process sets other than the global one (Horovod: "Adasum does not support
  non-global process sets yet"); ``synchronize()`` does nothing and
  ``skip_synchronize()`` is refused (the combination is of whole steps).
- One rank: no hooks, step() is the wrapped optimizer's (Adasum of one update
  is that update).
"""

from contextlib import contextmanager

import torch

from horovodlite.common.process_sets import global_process_set
from horovodlite.torch._enqueue import enqueue_allreduce
from horovodlite.torch._optimizer_base import _TOO_MANY_PASSES, _HorovodOptimizer, wrap
from horovodlite.torch.compression import Compression
from horovodlite.torch.mpi_ops import Adasum, size, synchronize

# The hooks step the ready parameters together once this many are ready, or
# this many bytes of them: few optimizer calls for a model of many small
# parameters, a large one sent at once.
_BATCH_PARAMS = 16
_BATCH_BYTES = 1 << 20


class _DistributedAdasumOptimizer(_HorovodOptimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1):
        super(self._hvl_made, self).__init__(params)
        self._compression = compression
        named_parameters = self._set_named_parameters(named_parameters, backward_passes_per_step)
        self._handles = {}              # parameter -> (handle, compression ctx), or (None, None) until sent
        self._ready = []                # stepped and sent together (_send_ready)
        self._ready_bytes = 0
        # Each parameter's value before its local step (the update is applied to it).
        self._starting_models = {p: torch.zeros_like(p, requires_grad=False) for _, p in named_parameters}
        if size() > 1:
            self._hook_parameters()

    def _step_some(self, ps):
        """The wrapped optimizer's step on the parameters ps alone (the others hidden)."""
        ids = {id(p) for p in ps}
        stashed = [group["params"] for group in self.param_groups]
        try:
            for group in self.param_groups:
                group["params"] = [v for v in group["params"] if id(v) in ids]
            super(self._hvl_made, self).step()
        finally:
            for group, params in zip(self.param_groups, stashed):
                group["params"] = params

    def _send_ready(self):
        """Steps the ready parameters locally and sends their updates (the new
        value less the value before the step; reduced in place: p holds the
        update until step() applies the combined one)."""
        ready, self._ready, self._ready_bytes = self._ready, [], 0
        if not ready:
            return
        for p in ready:
            self._starting_models[p].data.copy_(p.data)
        self._step_some(ready)
        for p in ready:
            p.data.sub_(self._starting_models[p])
            compressed, ctx = self._compression.compress(p.data)
            handle = enqueue_allreduce(compressed, self._parameter_names.get(p), Adasum, global_process_set, 1.0, 1.0,
                                       True, Compression.none, None, "DistributedOptimizer")
            self._handles[p] = (handle, (compressed, ctx))

    def _mark_ready(self, p):
        self._handles[p] = (None, None)
        self._ready.append(p)
        self._ready_bytes += p.numel() * p.element_size()

    def _make_hook(self, p):
        def hook(*ignore):
            # (A delay of 0: p's update is ready or sent already.)
            if self._allreduce_delay[p] <= 0:
                raise AssertionError(_TOO_MANY_PASSES)
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                self._mark_ready(p)
                if len(self._ready) >= _BATCH_PARAMS or self._ready_bytes >= _BATCH_BYTES:
                    self._send_ready()
            else:
                self._handles[p] = (None, None)
        return hook

    def synchronize(self):
        pass

    @contextmanager
    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when using Adasum optimizer.")

    def step(self, closure=None):
        if size() == 1:
            return super(self._hvl_made, self).step(closure)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        # Parameters whose update has not left yet (no gradient this step, or
        # step() before backward_passes_per_step passes), and those the hooks
        # collected: stepped and sent now.
        for p in self._requires_update:
            if self._allreduce_delay[p] > 0:
                self._mark_ready(p)
        self._send_ready()
        for p, (handle, (_compressed, ctx)) in self._handles.items():
            start = self._starting_models[p]
            delta = self._compression.decompress(synchronize(handle), ctx)
            # One pass: p (which holds the combined update, uncompressed) becomes
            # its value before the local step plus that update. start is not read
            # again until the next local step copies p into it.
            torch.add(start.data, delta.data, out=p.data)
            self._allreduce_delay[p] = self.backward_passes_per_step
        self._handles.clear()
        return loss


def adasum_optimizer(optimizer, named_parameters, compression, backward_passes_per_step, process_set):
    """DistributedOptimizer's op=Adasum case (the arguments as there)."""
    if process_set is not global_process_set:
        raise NotImplementedError("DistributedOptimizer: Adasum does not support non-global process sets yet "
                                  "(as Horovod)")
    return wrap(optimizer, _DistributedAdasumOptimizer, named_parameters, compression, backward_passes_per_step)
