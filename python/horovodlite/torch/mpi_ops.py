"""Collectives on torch tensors with the names, signatures, defaults and
autograd behaviour of ``horovod.torch.mpi_ops`` (Horovod 0.28).

Asynchronous functions return a handle at once; ``poll(handle)`` tells whether
it has completed and ``synchronize(handle)`` waits and returns the result
(handles.py). The allreduce family lives in _allreduce.py; this module is the
public face (everything Horovod's mpi_ops exports) and holds the other
collectives. Every collective enters the core through _enqueue.py, which
checks the arguments once (and says who checks what).
"""

import torch

from horovodlite.common.exceptions import HorovodInternalError  # noqa: F401  (re-exported)
from horovodlite.common.process_sets import ProcessSet, _ps_rank, _ps_size, global_process_set  # noqa: F401
from horovodlite.torch._allreduce import (  # noqa: F401  (re-exported)
    HorovodAllreduce,
    HorovodGroupedAllreduce,
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    grouped_allreduce,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
)
from horovodlite.torch._checks import check_average_or_sum, check_name, check_tensor, check_tensors
from horovodlite.torch._enqueue import (
    enqueue_allgather,
    enqueue_alltoall,
    enqueue_broadcast,
    enqueue_grouped_allgather,
    enqueue_grouped_reducescatter,
    enqueue_join,
    enqueue_reducescatter,
    run_barrier,
)
from horovodlite.torch.basics import Adasum, Average, Max, Min, Product, Sum, rank, size  # noqa: F401
from horovodlite.torch.compression import Compression, check_compressible
from horovodlite.torch.handles import _Handle, poll, synchronize  # noqa: F401  (re-exported)

# -------------------------------------------------------------- allgather ----

def allgather_async(tensor, name=None, process_set=global_process_set):
    """Asynchronously concatenates every process's ``tensor`` along dimension 0
    (which may differ between processes; the other dimensions must match)."""
    return enqueue_allgather(tensor, name, process_set, "allgather_async")


def _allgather_grad(grad_output, dim0, process_set):
    # Horovod's convention: the incoming gradients are averaged across ranks,
    # then each rank keeps the rows it contributed.
    grad_reduced = allreduce(grad_output, op=Average, process_set=process_set)
    dims = allgather(torch.tensor([dim0], dtype=torch.int64), process_set=process_set)
    offset = int(dims[:_ps_rank(process_set, "allgather")].sum().item())
    return grad_reduced.narrow(0, offset, dim0)


class HorovodAllgather(torch.autograd.Function):
    """Allgather; the gradient is the averaged incoming gradient's slice of this rank's rows."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        handle = enqueue_allgather(tensor, name, process_set, "allgather")
        ctx.dim = tensor.shape[0] if tensor.dim() > 0 else 1
        ctx.scalar = tensor.dim() == 0
        ctx.process_set = process_set
        return handle.synchronize()

    @staticmethod
    def backward(ctx, grad_output):
        grad = _allgather_grad(grad_output, ctx.dim, ctx.process_set)
        return (grad.reshape(()) if ctx.scalar else grad), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every process's ``tensor`` along dimension 0. Differentiable."""
    return HorovodAllgather.apply(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Asynchronous allgather of a list of tensors; synchronize() returns a list."""
    return enqueue_grouped_allgather(tensors, name, process_set, "grouped_allgather_async")


class HorovodGroupedAllgather(torch.autograd.Function):
    """Grouped allgather with the gradient of HorovodAllgather for each tensor."""

    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        handle = enqueue_grouped_allgather(list(tensors), name, process_set, "grouped_allgather")
        ctx.dims = [t.shape[0] if t.dim() > 0 else 1 for t in tensors]
        ctx.scalars = [t.dim() == 0 for t in tensors]
        ctx.process_set = process_set
        return tuple(synchronize(handle))

    @staticmethod
    def backward(ctx, *grad_output):
        grads = []
        for g, dim0, scalar in zip(grad_output, ctx.dims, ctx.scalars):
            grad = _allgather_grad(g, dim0, ctx.process_set)
            grads.append(grad.reshape(()) if scalar else grad)
        return (None, None) + tuple(grads)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Allgather of a list of tensors; returns a list. Differentiable."""
    check_tensors(tensors, "grouped_allgather")  # before they are unpacked
    return list(HorovodGroupedAllgather.apply(name, process_set, *tensors))


# ------------------------------------------------------ sparse allreduce ----

def _sparse_finish(tensor, op, n):
    def finish(parts, outputs):
        indices, values, shapes = outputs
        if shapes.numel() != n * tensor.dim():
            raise ValueError("sparse_allreduce_async of '%s': ranks disagree about the number of dimensions"
                             % parts[0].name.rsplit(".", 1)[0])
        shapes = shapes.reshape(n, -1)
        differ = [r for r in range(n) if not torch.equal(shapes[r], shapes[0])]
        if differ:
            raise ValueError("sparse_allreduce_async of '%s': the sparse tensor's size differs between ranks "
                             "(rank 0: %s; rank(s) %s: %s)" % (parts[0].name.rsplit(".", 1)[0],
                                                              shapes[0].tolist(), ", ".join(map(str, differ)),
                                                              [shapes[r].tolist() for r in differ]))
        if op == Average:
            values = values / n
        return torch.sparse_coo_tensor(indices.t(), values, tensor.shape)
    return finish


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Asynchronous allreduce of a sparse COO tensor, as Horovod: every rank's
    indices and values are allgathered (ranks may hold different numbers of
    entries) and, for hvd.Average, the values divided by the number of ranks.
    synchronize() returns the (uncoalesced) sparse sum or average, whose dense
    form equals the allreduce of the dense tensors."""
    what = "sparse_allreduce_async"
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("%s: expected a torch.Tensor, got %s" % (what, type(tensor).__name__))
    if tensor.layout != torch.sparse_coo:
        raise ValueError("%s: expected a sparse COO tensor (layout torch.sparse_coo), got %s"
                         % (what, tensor.layout))
    op = check_average_or_sum(op, what)
    base = check_name(name, what) or "sparse_allreduce.noname.%d" % _next_sparse_id()
    n = _ps_size(process_set, what)
    # allgather concatenates along dimension 0: indices travel as (nnz, sparse_dim).
    indices = tensor._indices().t().contiguous()
    values = tensor._values().contiguous()
    # The size travels too (a few bytes, fused with the rest) so that ranks that
    # disagree about it get an error instead of a tensor with foreign indices.
    shape = torch.tensor(list(tensor.shape), dtype=torch.int64)
    parts = [enqueue_allgather(indices, base + ".indices", process_set, what),
             enqueue_allgather(values, base + ".values", process_set, what),
             enqueue_allgather(shape, base + ".size", process_set, what)]
    return _Handle(parts, _sparse_finish(tensor, op, n))


_sparse_ids = [0]


def _next_sparse_id():
    _sparse_ids[0] += 1
    return _sparse_ids[0]


# -------------------------------------------------------------- broadcast ----

def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Asynchronously returns root_rank's ``tensor`` on every process (the input
    is not modified)."""
    return enqueue_broadcast(tensor, root_rank, name, process_set, False, "broadcast_async")


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place form of broadcast_async(): ``tensor`` receives root's value."""
    return enqueue_broadcast(tensor, root_rank, name, process_set, True, "broadcast_async_")


class HorovodBroadcast(torch.autograd.Function):
    """Broadcast; the gradient reaches the root only (averaged over ranks, as Horovod)."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return enqueue_broadcast(tensor, root_rank, name, process_set, False, "broadcast").synchronize()

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        if rank() != ctx.root_rank:
            grad_reduced = grad_reduced * 0
        return grad_reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns root_rank's ``tensor`` on every process. Differentiable."""
    return HorovodBroadcast.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast; returns ``tensor``."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# --------------------------------------------------------------- alltoall ----

def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Asynchronously sends rows of dimension 0 to every process: ``splits[j]``
    rows to rank j (even split when None). synchronize() returns
    ``(output, received_splits)``."""
    return enqueue_alltoall(tensor, splits, name, process_set, "alltoall_async")


class HorovodAlltoall(torch.autograd.Function):
    """Alltoall; the gradient is the alltoall of the incoming gradient sent back."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received_splits = synchronize(enqueue_alltoall(tensor, splits, name, process_set, "alltoall"))
        ctx.process_set = process_set
        ctx.recvsplits = received_splits
        if splits is None:
            return output
        ctx.mark_non_differentiable(received_splits)
        return output, received_splits

    @staticmethod
    def backward(ctx, grad_output, *dead_gradients):
        grad_wrt_tensor, _ = alltoall(grad_output, splits=ctx.recvsplits, process_set=ctx.process_set)
        return grad_wrt_tensor, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Scatters rows of ``tensor`` to every process and gathers theirs.
    Returns the gathered tensor, and when ``splits`` is given also the tensor of
    rows received from each rank. Differentiable."""
    return HorovodAlltoall.apply(tensor, splits, name, process_set)


# ---------------------------------------------------------- reducescatter ----

def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Asynchronously reduces ``tensor`` across processes and scatters
    dimension 0: rank r keeps its block of rows (the first ``dim0 % size``
    ranks get one row more)."""
    return enqueue_reducescatter(tensor, name, op, process_set, prescale_factor, postscale_factor,
                                 "reducescatter_async")


def _reducescatter_grad(grad_output, op, prescale_factor, postscale_factor, process_set):
    # As Horovod: gather the incoming gradients back; Sum scales by the number of ranks.
    grad = allgather(grad_output, process_set=process_set)
    scale = float(prescale_factor) * float(postscale_factor)
    if op == Sum:
        scale *= _ps_size(process_set, "reducescatter")
    return grad * scale if scale != 1.0 else grad


class HorovodReducescatter(torch.autograd.Function):
    """Reducescatter; the gradient is the allgather of the incoming gradient."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.op = op
        ctx.process_set = process_set
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        return enqueue_reducescatter(tensor, name, op, process_set, prescale_factor, postscale_factor,
                                     "reducescatter").synchronize()

    @staticmethod
    def backward(ctx, grad_output):
        grad = _reducescatter_grad(grad_output, ctx.op, ctx.prescale_factor, ctx.postscale_factor,
                                   ctx.process_set)
        return grad, None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces ``tensor`` across processes and returns this rank's block of
    dimension 0. Differentiable."""
    if compression is not Compression.none:
        check_tensor(tensor, "reducescatter")  # before the compressor sees it
        check_compressible((tensor,), compression, name, "reducescatter")
    compressed, ctx = compression.compress(tensor)
    out = HorovodReducescatter.apply(compressed, name, op, process_set, prescale_factor, postscale_factor)
    return compression.decompress(out, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Asynchronous reducescatter of a list of tensors; synchronize() returns a list."""
    return enqueue_grouped_reducescatter(tensors, name, op, process_set, prescale_factor, postscale_factor,
                                         "grouped_reducescatter_async")


class HorovodGroupedReducescatter(torch.autograd.Function):
    """Grouped reducescatter with HorovodReducescatter's gradient for each tensor."""

    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.op = op
        ctx.process_set = process_set
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        return tuple(synchronize(enqueue_grouped_reducescatter(list(tensors), name, op, process_set, prescale_factor,
                                                               postscale_factor, "grouped_reducescatter")))

    @staticmethod
    def backward(ctx, *grad_output):
        grads = [_reducescatter_grad(g, ctx.op, ctx.prescale_factor, ctx.postscale_factor, ctx.process_set)
                 for g in grad_output]
        return (None, None, None, None, None) + tuple(grads)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reducescatter of a list of tensors; returns a list. Differentiable."""
    check_tensors(tensors, "grouped_reducescatter")  # before they are unpacked and compressed
    check_compressible(tensors, compression, name, "grouped_reducescatter")
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors])
    outs = HorovodGroupedReducescatter.apply(name, op, process_set, prescale_factor, postscale_factor,
                                             *compressed)
    return [compression.decompress(t, c) for t, c in zip(outs, ctxs)]


# ------------------------------------------------------- join and barrier ----

def join(device=-1):
    """This rank has no more data. Until every rank has joined, the others'
    allreduces proceed with this rank contributing zeros. Blocks until all
    ranks have joined and returns the rank that joined last.

    ``device``: as in Horovod, -1 or a GPU id (programs pass
    ``hvd.local_rank()``). Horovod allocates the joined rank's zero tensors on
    that GPU; horovodlite's core writes the zeros into its own (fusion or
    staging) buffer, so the id is accepted and needs no GPU: it works on a
    CPU-only job too."""
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError("join: device must be an int, got %s" % type(device).__name__)
    if device < -1:
        raise ValueError("join: device must be -1 (CPU) or a device id >= 0, got %d" % device)
    handle = enqueue_join()
    handle.synchronize()
    return handle.last_joined_rank()


def barrier(process_set=global_process_set):
    """Blocks until every rank has reached the barrier."""
    run_barrier(process_set, "barrier")
