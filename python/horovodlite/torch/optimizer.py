"""DistributedOptimizer, as ``horovod.torch.optimizer``.

A hook on each parameter that runs when its gradient has been accumulated
(``register_post_accumulate_grad_hook`` on PyTorch 2.1+, a hook on the
parameter's grad accumulator before; see _compat.py) starts that gradient's
allreduce while backward is still running; step() waits for them and steps.

Beyond Horovod, the hooks count each parameter once per backward pass even
when activation checkpointing (torch.utils.checkpoint with use_reentrant=True)
runs parts of the backward pass as nested backward calls: a parameter used in
several checkpointed segments gets its accumulator hook called once per
segment. Passes are told apart by the outermost ``torch.autograd.backward``
frame (or the autograd graph task where no such frame is on the hook's thread;
_compat.backward_pass_key). With ``use_reentrant=False`` (2.x's recommendation)
each gradient is accumulated once per pass anyway.

Gradients are reduced in place, as Horovod does: the allreduce reads p.grad and
writes the average back into it (the core fuses small gradients into its fusion
buffer), so no gradient-sized buffer is kept per parameter and p.grad stays the
tensor autograd made. With Compression.fp16 (.bf16) the core converts float32/float64
gradients to fp16 (bf16) while packing them and back while unpacking (in place too).
A piece of gradient that arrives after the parameter's allreduce was started
(same pass) is kept aside by a tensor hook, which first waits for that
allreduce (autograd then adds zeros to p.grad, which must not race with the
core's write); the pieces are reduced at synchronize() and added to p.grad, and
such parameters are sent at synchronize() from then on. Other compressors and
grouped allreduces (``groups=``) work out of place: p.grad is set_() to the
result.
"""

import os
import warnings
from contextlib import contextmanager

import torch

from horovodlite.common.process_sets import _ps_id, global_process_set
from horovodlite.torch._checks import check_average_or_sum
from horovodlite.torch._compat import backward_pass_key
from horovodlite.torch._enqueue import enqueue_allreduce
from horovodlite.torch._optimizer_base import _TOO_MANY_PASSES, _HorovodOptimizer, wrap
from horovodlite.torch._sparse_grads import SparseGradients
from horovodlite.torch.compression import WIRE_COMPRESSIONS, Compression
from horovodlite.torch.functions import broadcast_object
from horovodlite.torch.mpi_ops import (  # noqa: F401
    Adasum,
    Average,
    Sum,
    allreduce_async,
    grouped_allreduce_async,
    size,
    sparse_allreduce_async,
    synchronize,
)

# _Pending.ctx of an allreduce that writes its result into the tensor it reads
# (p.grad, or the dense copy of a sparse p.grad with sparse_as_dense).
_IN_PLACE = object()


class _Pending:
    """One parameter's gradient allreduce for the current step."""

    __slots__ = ("handle", "ctx")

    def __init__(self, handle, ctx):
        self.handle = handle
        self.ctx = ctx


class _DistributedOptimizer(_HorovodOptimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1, op=Average,
                 gradient_predivide_factor=1.0, groups=None, sparse_as_dense=False,
                 process_set=global_process_set):
        super(self._hvl_made, self).__init__(params)
        self._compression = compression
        self._set_named_parameters(named_parameters, backward_passes_per_step)
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self._sparse = SparseGradients()  # parameters whose gradients every rank knows to be sparse
        self.process_set = process_set

        self._handles = {}          # parameter (or group tuple) -> _Pending, or None until sent
        self._synchronized = False
        self._should_synchronize = True
        self._pass_key = None       # what identifies the current backward pass (_compat)
        self._counted = set()       # parameters counted in the current pass
        self._rest = {}             # parameter -> gradient that arrived after its allreduce left
        self._late = set()          # parameters sent at synchronize() (their gradient arrives in pieces)

        if groups is not None:
            if not (isinstance(groups, list) or (isinstance(groups, int) and groups > 0)):
                raise ValueError("groups should be a non-negative integer or a list of list of torch.Tensor.")
            if isinstance(groups, list):
                grouped_parameter_ids = set()
                for group in groups:
                    for p in group:
                        if not isinstance(p, torch.Tensor):
                            raise ValueError("groups must consist of torch.Tensor.")
                        if id(p) in grouped_parameter_ids:
                            raise ValueError("A parameter can only appear once in groups.")
                        grouped_parameter_ids.add(id(p))
        self._groups = groups
        self._p_to_group = {}
        self._group_counts = {}

        # As Horovod: on a rank outside the process set no hooks are registered
        # and the optimizer acts as the wrapped one (synchronize() does nothing).
        if process_set.included() is not False and (size() > 1 or os.environ.get("HOROVOD_ELASTIC") == "1"):
            self._register_hooks()

    def load_state_dict(self, *args, **kwargs):
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        self._new_step()
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        super(self._hvl_made, self).load_state_dict(*args, **kwargs)

    def _register_hooks(self):
        if self._groups is not None:
            p_list = [p for group in self.param_groups for p in group["params"] if p.requires_grad]
            # The same parameter order on every rank: rank 0's.
            # (Among the optimizer's process set, from its lowest rank.)
            root = 0 if self.process_set is global_process_set else min(self.process_set.ranks)
            names = broadcast_object([self._parameter_names.get(p) for p in p_list], root_rank=root,
                                     name="DistributedOptimizer.groups", process_set=self.process_set)
            p_list = sorted(p_list, key=lambda p: names.index(self._parameter_names.get(p)))
            if isinstance(self._groups, list):
                p_groups = []
                grouped = set()
                ids = {id(p) for p in p_list}
                for group in self._groups:
                    p_groups.append([p for p in group if id(p) in ids])
                    grouped.update(id(p) for p in p_groups[-1])
                p_groups.extend([p] for p in p_list if id(p) not in grouped)
            else:
                n = self._groups
                k, m = divmod(len(p_list), n)
                p_groups = [p_list[i * k + min(i, m):(i + 1) * k + min(i + 1, m)] for i in range(n)]
            for group in (tuple(g) for g in p_groups if g):
                for p in group:
                    self._p_to_group[p] = group
                self._group_counts[group] = 0
        self._hook_parameters(self._make_piece_hook)

    def _scale_factors(self):
        if self.op == Average:
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            # Not computed here, but another rank may have computed it: send zeros
            # (an empty sparse gradient where every rank knows p's are sparse).
            empty = None if self.sparse_as_dense else self._sparse.empty_grad(p)
            p.grad = p.data.new(p.size()).zero_() if empty is None else empty
        name = self._parameter_names.get(p)
        tensor = p.grad
        if tensor.is_sparse:
            if not self.sparse_as_dense:
                return self._sparse_allreduce_grad_async(p, name)
            tensor = tensor.to_dense()  # a copy: reduced in place, added to p.grad at synchronize()
        pre, post = self._scale_factors()
        if self._compression is Compression.none or (self._compression in WIRE_COMPRESSIONS
                                                     and tensor.dtype in (torch.float32, torch.float64)):
            # In place (Horovod's allreduce_async_); fp16/bf16: converted inside
            # the core while packing for the wire and back while unpacking, no copy here.
            handle = enqueue_allreduce(tensor, name, self.op, self.process_set, pre, post, True, self._compression,
                                       None, "DistributedOptimizer")
            return _Pending(handle, _IN_PLACE)
        compressed, ctx = self._compression.compress(tensor)
        handle = allreduce_async(compressed, name=name, op=self.op, prescale_factor=pre,
                                 postscale_factor=post, process_set=self.process_set)
        return _Pending(handle, ctx)

    def _sparse_allreduce_grad_async(self, p, name):
        """A sparse gradient with sparse_as_dense=False: allgather of its indices
        and values, averaged or summed (Horovod's sparse_allreduce_async)."""
        handle = self._sparse.allreduce_async(p, p.grad, name, self.op, self.process_set)
        # The result is final and not compressed: decompress() must leave it as it is.
        return _Pending(handle, p.grad.dtype if self._compression in WIRE_COMPRESSIONS else None)

    def _grouped_allreduce_grad_async(self, ps):
        name = self._parameter_names.get(ps[0])
        for p in ps:
            if p.grad is None:
                p.grad = p.data.new(p.size()).zero_()
        compressed, ctxs = zip(*[self._compression.compress(p.grad) for p in ps])
        pre, post = self._scale_factors()
        handle = grouped_allreduce_async(list(compressed), name=name, op=self.op, prescale_factor=pre,
                                         postscale_factor=post, process_set=self.process_set)
        return _Pending(handle, ctxs)

    def _new_step(self):
        self._pass_key = None
        self._counted = set()

    def _in_current_pass(self, p):
        key = backward_pass_key()
        return key is not None and key == self._pass_key and p in self._counted

    def _make_piece_hook(self, p):
        def piece_hook(grad):
            pending = self._handles.get(p)
            if isinstance(pending, _Pending) and self._in_current_pass(p):
                # p's allreduce already left during this pass: keep this piece
                # aside and leave p.grad unchanged. Autograd still adds the zeros
                # returned here to p.grad: an in-place allreduce must have
                # written p.grad first.
                if pending.ctx is _IN_PLACE:
                    synchronize(pending.handle)
                rest = self._rest.get(p)
                self._rest[p] = grad.detach().clone() if rest is None else rest + grad.detach()
                return torch.zeros_like(grad)
            return None
        return piece_hook

    def _count_pass(self, p):
        """True if this hook call starts p's contribution to a new backward pass."""
        key = backward_pass_key()
        if key is None:
            return True
        if key != self._pass_key:
            self._pass_key = key
            self._counted = set()
        if p in self._counted:
            return False
        self._counted.add(p)
        return True

    def _make_hook(self, p):
        def hook(*ignore):
            if not self._count_pass(p):
                # Another piece of this pass's gradient (reentrant checkpointing);
                # if the allreduce already left, piece_hook kept it aside.
                return
            if p in self._handles and self._handles[p] is not None:
                if self._allreduce_delay[p] <= 0:
                    raise AssertionError(_TOO_MANY_PASSES)
            assert not p.grad.requires_grad
            assert self._allreduce_delay[p] > 0
            pending = None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0 and p not in self._late:
                if self._groups is not None:
                    group = self._p_to_group[p]
                    self._group_counts[group] += 1
                    if self._group_counts[group] == len(group):
                        self._handles[group] = self._grouped_allreduce_grad_async(group)
                        for gp in group:
                            self._handles.pop(gp, None)
                        self._group_counts[group] = 0
                        return
                else:
                    pending = self._allreduce_grad_async(p)
            self._handles[p] = pending
        return hook

    def synchronize(self):
        """Waits for every gradient allreduce, starting those whose hooks did not
        run (unused parameters get zero gradients, so every rank issues the
        same names). Call before step() to inspect or clip gradients. On a rank
        outside the optimizer's process set it does nothing (as Horovod)."""
        if self.process_set.included() is False:
            self._synchronized = True
            return
        completed = set()
        for x in self._handles.keys():
            completed.update(x) if isinstance(x, tuple) else completed.add(x)
        for p in self._requires_update - completed:
            self._handles[p] = self._allreduce_grad_async(p)
        for p, pending in list(self._handles.items()):
            if pending is None:
                self._handles[p] = self._allreduce_grad_async(p)
        # Every allreduce has been issued: first sparse exchanges may now wait for their checks.
        self._sparse.start()
        # Pieces that arrived after their allreduce left: reduce them too (all
        # issued before any wait, so ranks cannot wait on each other's order).
        late = {}
        pre, post = self._scale_factors()
        for p in sorted(self._rest, key=lambda q: self._parameter_names.get(q)):
            self._late.add(p)
            compressed, ctx = self._compression.compress(self._rest[p])
            late[p] = _Pending(allreduce_async(compressed, name=self._parameter_names.get(p) + ".late",
                                               op=self.op, prescale_factor=pre, postscale_factor=post,
                                               process_set=self.process_set), ctx)
        self._rest = {}
        for p, pending in self._handles.items():
            if isinstance(p, tuple):
                outputs = synchronize(pending.handle)
                for gp, output, gctx in zip(p, outputs, pending.ctx):
                    self._allreduce_delay[gp] = self.backward_passes_per_step
                    gp.grad.set_(self._compression.decompress(output, gctx).to(gp.grad.dtype))
                if self._groups is not None and self._group_counts.get(p, 0) != 0:
                    self._group_counts[p] = 0
                continue
            self._allreduce_delay[p] = self.backward_passes_per_step
            result = synchronize(pending.handle)
            in_place = pending.ctx is _IN_PLACE
            if not in_place:
                result = self._compression.decompress(result, pending.ctx)
            if p in late:
                extra = late[p]
                extra = self._compression.decompress(synchronize(extra.handle), extra.ctx)
                if in_place and not p.grad.is_sparse:
                    p.grad.add_(extra.to(p.grad.dtype))  # the same sum as result + extra
                    continue
                result = result + extra
            if p.grad.is_sparse:
                p.grad.zero_().add_(result.to_sparse() if not result.is_sparse else result)
            elif not in_place:
                p.grad.set_(result.to(p.grad.dtype))
        self._handles.clear()
        self._new_step()
        self._synchronized = True

    @contextmanager
    def skip_synchronize(self):
        """A context in which step() does not synchronize (use after calling
        synchronize() yourself, e.g. to clip gradients)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(). This can cause training slowdown. You may want to "
                              "consider using optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.", stacklevel=2)
            self.synchronize()
        self._synchronized = False
        return super(self._hvl_made, self).step(closure)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=global_process_set):
    """Wraps ``optimizer`` so that gradients are averaged (or summed) across
    ranks before each step, with the arguments of horovod.torch.DistributedOptimizer.

    Arguments:
        optimizer: the torch.optim.Optimizer to wrap.
        named_parameters: ``model.named_parameters()``; names the allreduces.
        compression: Compression.none, Compression.fp16 or Compression.bf16.
        backward_passes_per_step: backward passes (gradient accumulation steps)
            between allreduces.
        op: Average (default) or Sum.
        gradient_predivide_factor: with Average, scale by 1/f before the sum and f/size after.
        num_groups: deprecated; use groups.
        groups: an int (that many fused groups) or a list of lists of parameters.
        sparse_as_dense: send sparse gradients as dense tensors.
    """
    _ps_id(process_set, "DistributedOptimizer")
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if op == Adasum:  # the update, not the gradient, is combined (_adasum_optimizer.py)
        from horovodlite.torch._adasum_optimizer import adasum_optimizer
        return adasum_optimizer(optimizer, named_parameters, compression, backward_passes_per_step, process_set)
    check_average_or_sum(op, "DistributedOptimizer")
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed in v0.23.0.",
                      DeprecationWarning, stacklevel=2)
        if groups is None:
            groups = num_groups
    return wrap(optimizer, _DistributedOptimizer, named_parameters, compression, backward_passes_per_step, op,
                gradient_predivide_factor, groups, sparse_as_dense, process_set)
