"""Sparse gradients in DistributedOptimizer (sparse_as_dense=False) when a rank
computed none.

A sparse gradient travels as allgathers of its indices and values (names
``<param>.indices``, ``.values``, ``.size``); a dense one as an allreduce under
the parameter's own name. A rank on which the parameter got no gradient this
step sends something all the same (the other ranks wait for it):

- once every rank knows that the parameter's gradients are sparse, an empty
  sparse gradient, so that the exchange works and equals the dense computation;
- before that (its first sparse gradient) it cannot know, and sends dense
  zeros. So the first sparse exchange of a parameter starts with a check under
  the parameter's own name (an allgather of its sparse and dense dims): a rank
  that sent dense zeros meets it under the same name, and the core fails the name
  on every rank at once ("Mismatched operations for tensor ..., rank 0:
  allgather; rank 1: allreduce") instead of each side waiting for names the
  other never sends. When the check passes, every rank knows from then on.

The optimizer waits for the checks (all issued by then, so the order of waiting
cannot deadlock) and starts the exchanges before it waits for anything else.
"""

import torch

from horovodlite.common.exceptions import HorovodInternalError
from horovodlite.torch.mpi_ops import allgather_async, sparse_allreduce_async, synchronize


class _FirstExchange:
    """A parameter's first sparse exchange: the check is in flight; the exchange
    starts once it has passed (SparseGradients.start)."""

    __slots__ = ("param", "grad", "name", "op", "process_set", "check")

    def __init__(self, param, grad, name, op, process_set):
        self.param = param
        self.grad = grad
        self.name = name
        self.op = op
        self.process_set = process_set
        dims = torch.tensor([grad.sparse_dim(), grad.dense_dim()], dtype=torch.int64)
        self.check = allgather_async(dims, name=name, process_set=process_set)


class SparseGradients:
    """The parameters every rank knows to have sparse gradients."""

    def __init__(self):
        self._known = {}  # parameter -> (sparse_dim, dense_dim)

    def empty_grad(self, p):
        """An empty sparse gradient for ``p`` if every rank knows its gradients
        are sparse, else None."""
        dims = self._known.get(p)
        if dims is None:
            return None
        sparse_dim, dense_dim = dims
        indices = torch.empty((sparse_dim, 0), dtype=torch.int64, device=p.device)
        values = torch.empty((0,) + tuple(p.shape[sparse_dim:sparse_dim + dense_dim]), dtype=p.dtype,
                             device=p.device)
        return torch.sparse_coo_tensor(indices, values, p.shape)

    def allreduce_async(self, p, grad, name, op, process_set):
        """The exchange of ``grad`` (sparse), or its first exchange (a check first)."""
        if p in self._known:
            return sparse_allreduce_async(grad, name=name, op=op, process_set=process_set)
        return _FirstExchange(p, grad, name, op, process_set)

    def start(self, pendings):
        """Waits for the checks of first exchanges among ``pendings`` (objects with
        a ``handle`` attribute) and replaces each with its exchange."""
        first = [x for x in pendings if isinstance(x.handle, _FirstExchange)]
        for pending in sorted(first, key=lambda x: x.handle.name):
            f = pending.handle
            try:
                dims = synchronize(f.check).reshape(-1, 2)
            except HorovodInternalError as e:
                raise HorovodInternalError(
                    "DistributedOptimizer: the gradient of '%s' is sparse on this rank, but the ranks do not "
                    "all send it sparse (a rank that computed no gradient for it in its first sparse step sends "
                    "dense zeros, not knowing yet that it is sparse): %s. Make every rank compute this "
                    "parameter's gradient in its first step, or pass sparse_as_dense=True." % (f.name, e)) from e
            differ = [r for r in range(dims.shape[0]) if not torch.equal(dims[r], dims[0])]
            if differ:
                raise ValueError("DistributedOptimizer: the sparse gradient of '%s' has (sparse, dense) dims %s on "
                                 "the set's rank 0 but %s on rank(s) %s"
                                 % (f.name, dims[0].tolist(), [dims[r].tolist() for r in differ],
                                    ", ".join(map(str, differ))))
            self._known[f.param] = (f.grad.sparse_dim(), f.grad.dense_dim())
            pending.handle = sparse_allreduce_async(f.grad, name=f.name, op=f.op, process_set=f.process_set)
