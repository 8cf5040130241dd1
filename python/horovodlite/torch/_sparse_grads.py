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

At synchronize(), once every collective of the step has been issued, the
optimizer calls start(): it waits for the checks (all in flight, so the order of
waiting cannot deadlock) and starts the exchanges, before anything else is
waited for.
"""

import torch

from horovodlite.common.exceptions import HorovodInternalError
from horovodlite.torch.mpi_ops import allgather_async, sparse_allreduce_async, synchronize


class _FirstExchange:
    """A parameter's first sparse exchange, as a handle: the check is in flight;
    the exchange starts once it has passed (SparseGradients.start), and
    synchronize(handle) (which calls a callable handle) waits for it."""

    __slots__ = ("param", "grad", "name", "op", "process_set", "check", "exchange")

    def __init__(self, param, grad, name, op, process_set):
        self.param = param
        self.grad = grad
        self.name = name
        self.op = op
        self.process_set = process_set
        dims = torch.tensor([grad.sparse_dim(), grad.dense_dim()], dtype=torch.int64)
        self.check = allgather_async(dims, name=name, process_set=process_set)
        self.exchange = None

    def __call__(self):
        if self.exchange is None:
            raise HorovodInternalError("DistributedOptimizer: the sparse exchange of '%s' was not started "
                                       "(an earlier error in this step)" % self.name)
        return synchronize(self.exchange)


class SparseGradients:
    """The parameters every rank knows to have sparse gradients, and this step's
    first exchanges."""

    def __init__(self):
        self._known = {}  # parameter -> (sparse_dim, dense_dim)
        self._first = []  # _FirstExchange handles not started yet

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
        """A handle for the exchange of ``grad`` (sparse), or for its first
        exchange (a check first; start() must run before it is waited for)."""
        if p in self._known:
            return sparse_allreduce_async(grad, name=name, op=op, process_set=process_set)
        first = _FirstExchange(p, grad, name, op, process_set)
        self._first.append(first)
        return first

    def start(self):
        """Waits for the checks of this step's first exchanges (every collective of
        the step has been issued by then) and starts the exchanges."""
        if not self._first:
            return
        first, self._first = sorted(self._first, key=lambda f: f.name), []
        for f in first:
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
            f.exchange = sparse_allreduce_async(f.grad, name=f.name, op=f.op, process_set=f.process_set)
