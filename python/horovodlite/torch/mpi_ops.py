"""Collectives on torch tensors with the names, signatures, defaults and
autograd behaviour of ``horovod.torch.mpi_ops`` (Horovod 0.28).

Asynchronous functions return a handle at once; ``poll(handle)`` tells whether
it has completed and ``synchronize(handle)`` waits and returns the result.
"""

import warnings

import torch

from horovodlite.common.exceptions import HorovodInternalError  # noqa: F401  (re-exported)
from horovodlite.common.process_sets import ProcessSet, _ps_id, _ps_rank, _ps_size, global_process_set  # noqa: F401
from horovodlite.torch import _C
from horovodlite.torch.basics import _OPS, Adasum, Average, Max, Min, Product, Sum, rank, size  # noqa: F401
from horovodlite.torch.compression import Compression

# Reduce ops accepted at once (Adasum goes through _check_op).
_PLAIN_OPS = frozenset(op for op in _OPS if op != Adasum)


# ---------------------------------------------------------------- handles ----
#
# An operation with one core handle and nothing to do after it (allreduce,
# broadcast, reducescatter) returns the core handle itself (_C.Handle, which
# caches its result): no Python object per tensor, nothing for the cyclic
# garbage collector to track (issue 19: 200 tensors per round made it run every
# few rounds). Operations with several parts or a finishing function return a
# _Handle.

_CHandle = _C.Handle


class _Handle:
    """The result of an asynchronous operation: one or more core handles and a
    function that turns their outputs into what synchronize() returns."""

    __slots__ = ("_parts", "_finish", "_done", "_result", "__weakref__")

    def __init__(self, parts, finish):
        self._parts = parts
        self._finish = finish
        self._done = False
        self._result = None

    def __repr__(self):
        return "<horovodlite handle %s>" % ", ".join(p.name for p in self._parts)


def poll(handle):
    """True if the asynchronous operation behind ``handle`` has completed;
    ``synchronize(handle)`` will then return without blocking."""
    if type(handle) is _CHandle:
        return handle.poll()
    if not isinstance(handle, _Handle):
        raise TypeError("poll: expected a handle returned by a horovodlite *_async function, got %s"
                        % type(handle).__name__)
    return all(p.poll() for p in handle._parts)


def synchronize(handle):
    """Waits for the asynchronous operation behind ``handle`` and returns its
    result (a tensor, a list of tensors for grouped operations, or
    ``(output, received_splits)`` for alltoall). Raises HorovodInternalError if
    the operation failed (for example, ranks disagreed about its shape)."""
    if type(handle) is _CHandle:  # the common case: one core handle
        return handle.synchronize()
    if handle is None:
        return None
    if callable(handle) and not isinstance(handle, _Handle):
        return handle()
    if not isinstance(handle, _Handle):
        raise TypeError("synchronize: expected a handle returned by a horovodlite *_async function, got %s"
                        % type(handle).__name__)
    if not handle._done:
        outputs = [p.synchronize() for p in handle._parts]
        handle._result = handle._finish(handle._parts, outputs)
        handle._done = True
        handle._finish = None
    return handle._result


def _grouped(parts, outputs):
    return list(outputs)


# ------------------------------------------------------------- validation ----

def _check_tensor(tensor, what):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("%s: expected a torch.Tensor, got %s" % (what, type(tensor).__name__))
    if tensor.is_sparse:
        raise ValueError("%s: sparse tensors are not supported (use sparse_as_dense=True or .to_dense())" % what)


def _check_tensors(tensors, what):
    if isinstance(tensors, torch.Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError("%s: expected a list or tuple of torch.Tensor, got %s" % (what, type(tensors).__name__))
    if len(tensors) == 0:
        raise ValueError("%s: the list of tensors is empty" % what)
    for t in tensors:
        _check_tensor(t, what)


def _name(name, what):
    if name is None:
        return ""
    if not isinstance(name, str):
        raise TypeError("%s: name must be a str or None, got %s" % (what, type(name).__name__))
    return name


def _group_names(name, count, what):
    base = _name(name, what)
    if not base:
        return [""] * count
    return ["%s.%d" % (base, i) for i in range(count)]


def _check_root(root_rank, what):
    if isinstance(root_rank, bool) or not isinstance(root_rank, int):
        raise TypeError("%s: root_rank must be an int, got %s" % (what, type(root_rank).__name__))
    n = size()
    if not 0 <= root_rank < n:
        raise ValueError("%s: root_rank %d is out of range [0, %d)" % (what, root_rank, n))


def _check_factor(value, what, arg):
    if type(value) is float:  # the common case, first
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("%s: %s must be a number, got %s" % (what, arg, type(value).__name__))
    return float(value)


def _resolve_op(op, average, what):
    """Horovod's handling of the deprecated ``average`` argument."""
    if average is None:  # the common cases, first
        if op is None:
            return Average
        if type(op) is int and op in _PLAIN_OPS:
            return op
    if op is not None and average is not None:
        raise ValueError("%s: the op parameter supersedes average. Please provide only one of them." % what)
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed",
                      DeprecationWarning, stacklevel=3)
        op = Average if average else Sum
    if op is None:
        op = Average
    return _check_op(op, what)


def _check_op(op, what):
    if isinstance(op, bool) or not isinstance(op, int) or op not in _OPS:
        raise ValueError("%s: op must be one of hvd.Average, Sum, Min, Max, Product (got %r)" % (what, op))
    return op


# -------------------------------------------------------------- allreduce ----
#
# One set of checks per call: Python checks what only Python can (argument
# types, Horovod's op and `average` rules, the process set); the tensor itself
# (dtype, device, layout, size) is checked once, by the adapter and the core,
# whose errors name the tensor.

def _check_allreduce_args(tensor, name, prescale_factor, postscale_factor, process_set, what):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("%s: expected a torch.Tensor, got %s" % (what, type(tensor).__name__))
    psid = 0 if process_set is global_process_set else _ps_id(process_set, what)
    name = "" if name is None else _name(name, what)
    pre = _check_factor(prescale_factor, what, "prescale_factor")
    post = _check_factor(postscale_factor, what, "postscale_factor")
    return name, pre, post, psid


def _core_fp16(tensor, compression, op, prescale_factor, postscale_factor):
    """Whether ``compression`` is Horovod's fp16 compression of a tensor that the
    core converts to fp16 while packing it for the wire (float32):
    no fp16 copy in Python, the result in the tensor's dtype. Taken where the
    result is the one Horovod's compress / fp16 allreduce / decompress gives
    (the core rounds Average's quotient to fp16 as Horovod does); a prescale
    factor (which the core applies before the conversion, keeping precision
    Horovod loses) or a postscale factor takes the Python compressor."""
    if compression is not Compression.fp16 or not isinstance(tensor, torch.Tensor):
        return False
    if tensor.dtype is not torch.float32:
        # float64: torch (hence Horovod's compressor) rounds to fp16 through
        # float32, the core rounds once; rare enough to keep Horovod's path.
        return False
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        return False
    return op in (Sum, Average, Min, Max)


def _allreduce_async(tensor, name, op, prescale_factor, postscale_factor, process_set, in_place, what,
                     compression=Compression.none, output=None):
    """compression: Compression.none, or Compression.fp16 to send float32 and
    float64 as fp16, converted inside the core while packing (no fp16 copy; the
    result has the input's dtype; other dtypes go as they are). output (out of
    place only): the tensor to write the result into (same shape and dtype as
    ``tensor``), e.g. a buffer reused from step to step; None: a new tensor."""
    if isinstance(tensor, torch.Tensor) and tensor.is_sparse:
        raise ValueError("%s: sparse tensors are not supported (use sparse_as_dense=True or .to_dense())" % what)
    name, pre, post, psid = _check_allreduce_args(tensor, name, prescale_factor, postscale_factor, process_set,
                                                  what)
    fp16_wire = False
    if compression is not Compression.none:
        if compression is not Compression.fp16:
            raise ValueError("%s: the core compresses only with Compression.fp16; compress other ways before "
                             "calling" % what)
        fp16_wire = tensor.dtype is torch.float32 or tensor.dtype is torch.float64
    if output is not None:
        _check_tensor(output, what)
        if in_place:
            raise ValueError("%s: an output tensor cannot be given to the in-place form" % what)
    return _C.allreduce_async(tensor, name, op, pre, post, in_place, fp16_wire, output, psid)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set, compression=Compression.none):
    """Asynchronously averages (or sums, ...) ``tensor`` over all processes; the
    input is not modified. Returns a handle for poll()/synchronize().
    ``compression=hvd.Compression.fp16`` (a horovodlite extension; Horovod's
    allreduce_async has no compression argument) sends float32/float64 tensors
    as fp16 and returns the result in the tensor's dtype, as allreduce() does."""
    op = _resolve_op(op, average, "allreduce_async")
    if compression is Compression.none or _core_fp16(tensor, compression, op, prescale_factor, postscale_factor):
        return _allreduce_async(tensor, name, op, prescale_factor, postscale_factor, process_set, False,
                                "allreduce_async", compression)
    compressed, ctx = compression.compress(tensor)
    handle = _allreduce_async(compressed, name, op, prescale_factor, postscale_factor, process_set, False,
                              "allreduce_async")
    return _Handle([handle], lambda parts, outputs: compression.decompress(outputs[0], ctx))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """In-place form of allreduce_async(): ``tensor`` receives the result."""
    op = _resolve_op(op, average, "allreduce_async_")
    if process_set is global_process_set and type(name) is str and type(prescale_factor) is float \
            and type(postscale_factor) is float and isinstance(tensor, torch.Tensor) and not tensor.is_sparse:
        # The common case (DistributedOptimizer's hooks, per-parameter loops):
        # straight to the core; the adapter and the core check the tensor.
        return _C.allreduce_async(tensor, name, op, prescale_factor, postscale_factor, True, False, None, 0)
    return _allreduce_async(tensor, name, op, prescale_factor, postscale_factor, process_set, True,
                            "allreduce_async_")


class HorovodAllreduce(torch.autograd.Function):
    """Allreduce whose gradient is the same allreduce of the incoming gradient."""

    @staticmethod
    def forward(ctx, tensor, average, name, op, prescale_factor, postscale_factor, process_set):
        ctx.average = average
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        handle = allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor, process_set)
        return synchronize(handle)

    @staticmethod
    def backward(ctx, grad_output):
        return (allreduce(grad_output, average=ctx.average, op=ctx.op, prescale_factor=ctx.prescale_factor,
                          postscale_factor=ctx.postscale_factor, process_set=ctx.process_set),
                None, None, None, None, None, None)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Averages (or sums, ...) ``tensor`` over all processes and returns the
    result; the input is not modified. Differentiable."""
    if not (torch.is_grad_enabled() and isinstance(tensor, torch.Tensor) and tensor.requires_grad):
        # No graph to record: straight to the core, one set of checks, the
        # output from the adapter's pool, fp16 converted by the core.
        resolved = _resolve_op(op, average, "allreduce")
        if compression is Compression.none or _core_fp16(tensor, compression, resolved, prescale_factor,
                                                         postscale_factor):
            name, pre, post, psid = _check_allreduce_args(tensor, name, prescale_factor, postscale_factor,
                                                          process_set, "allreduce")
            if tensor.is_sparse:
                _check_tensor(tensor, "allreduce")
            return _C.allreduce_async(tensor, name, resolved, pre, post, False,
                                      compression is not Compression.none, None, psid).synchronize()
    _check_tensor(tensor, "allreduce")
    _resolve_op(op, average, "allreduce")
    tensor_compressed, ctx = compression.compress(tensor)
    reduced = HorovodAllreduce.apply(tensor_compressed, average, name, op, prescale_factor, postscale_factor,
                                     process_set)
    return compression.decompress(reduced, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """In-place allreduce; returns ``tensor``."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor,
                                        process_set))


def _grouped_allreduce_async(tensors, name, op, prescale_factor, postscale_factor, process_set, in_place,
                             what):
    _check_tensors(tensors, what)
    psid = _ps_id(process_set, what)
    pre = _check_factor(prescale_factor, what, "prescale_factor")
    post = _check_factor(postscale_factor, what, "postscale_factor")
    names = _group_names(name, len(tensors), what)
    # One group: negotiated and executed together (Horovod's group_id).
    return _Handle(_C.grouped_allreduce_async(list(tensors), names, op, pre, post, in_place, psid), _grouped)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Asynchronous allreduce of a list of tensors (fused together when they fit
    the fusion buffer); synchronize() returns the list of results."""
    op = _resolve_op(op, average, "grouped_allreduce_async")
    return _grouped_allreduce_async(tensors, name, op, prescale_factor, postscale_factor, process_set, False,
                                    "grouped_allreduce_async")


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """In-place form of grouped_allreduce_async()."""
    op = _resolve_op(op, average, "grouped_allreduce_async_")
    return _grouped_allreduce_async(tensors, name, op, prescale_factor, postscale_factor, process_set, True,
                                    "grouped_allreduce_async_")


class HorovodGroupedAllreduce(torch.autograd.Function):
    """Grouped allreduce; each gradient is the grouped allreduce of the incoming ones."""

    @staticmethod
    def forward(ctx, average, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.average = average
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        handle = grouped_allreduce_async(list(tensors), average, name, op, prescale_factor, postscale_factor,
                                         process_set)
        return tuple(synchronize(handle))

    @staticmethod
    def backward(ctx, *grad_output):
        grads = grouped_allreduce(list(grad_output), average=ctx.average, op=ctx.op,
                                  prescale_factor=ctx.prescale_factor, postscale_factor=ctx.postscale_factor,
                                  process_set=ctx.process_set)
        return (None, None, None, None, None, None) + tuple(grads)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Allreduce of a list of tensors; returns the list of results. Differentiable."""
    _check_tensors(tensors, "grouped_allreduce")
    _resolve_op(op, average, "grouped_allreduce")
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors])
    reduced = HorovodGroupedAllreduce.apply(average, name, op, prescale_factor, postscale_factor, process_set,
                                            *compressed)
    return [compression.decompress(t, c) for t, c in zip(reduced, ctxs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    """In-place grouped allreduce; returns the list of (input) tensors."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


# -------------------------------------------------------------- allgather ----

def allgather_async(tensor, name=None, process_set=global_process_set):
    """Asynchronously concatenates every process's ``tensor`` along dimension 0
    (which may differ between processes; the other dimensions must match)."""
    _check_tensor(tensor, "allgather_async")
    psid = _ps_id(process_set, "allgather_async")
    return _C.allgather_async(tensor, _name(name, "allgather_async"), psid)


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
        ctx.dim = tensor.shape[0] if tensor.dim() > 0 else 1
        ctx.scalar = tensor.dim() == 0
        ctx.process_set = process_set
        return synchronize(allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = _allgather_grad(grad_output, ctx.dim, ctx.process_set)
        return (grad.reshape(()) if ctx.scalar else grad), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every process's ``tensor`` along dimension 0. Differentiable."""
    _check_tensor(tensor, "allgather")
    return HorovodAllgather.apply(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Asynchronous allgather of a list of tensors; synchronize() returns a list."""
    _check_tensors(tensors, "grouped_allgather_async")
    psid = _ps_id(process_set, "grouped_allgather_async")
    names = _group_names(name, len(tensors), "grouped_allgather_async")
    return _Handle(_C.grouped_allgather_async(list(tensors), names, psid), _grouped)


class HorovodGroupedAllgather(torch.autograd.Function):
    """Grouped allgather with the gradient of HorovodAllgather for each tensor."""

    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.dims = [t.shape[0] if t.dim() > 0 else 1 for t in tensors]
        ctx.scalars = [t.dim() == 0 for t in tensors]
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allgather_async(list(tensors), name, process_set)))

    @staticmethod
    def backward(ctx, *grad_output):
        grads = []
        for g, dim0, scalar in zip(grad_output, ctx.dims, ctx.scalars):
            grad = _allgather_grad(g, dim0, ctx.process_set)
            grads.append(grad.reshape(()) if scalar else grad)
        return (None, None) + tuple(grads)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Allgather of a list of tensors; returns a list. Differentiable."""
    _check_tensors(tensors, "grouped_allgather")
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
    psid = _ps_id(process_set, what)
    op = _check_op(op, what)
    if op not in (Average, Sum):
        raise ValueError("%s: op must be hvd.Average or hvd.Sum" % what)
    base = _name(name, what) or "sparse_allreduce.noname.%d" % _next_sparse_id()
    # allgather concatenates along dimension 0: indices travel as (nnz, sparse_dim).
    indices = tensor._indices().t().contiguous()
    values = tensor._values().contiguous()
    # The size travels too (a few bytes, fused with the rest) so that ranks that
    # disagree about it get an error instead of a tensor with foreign indices.
    shape = torch.tensor(list(tensor.shape), dtype=torch.int64)
    parts = [_C.allgather_async(indices, base + ".indices", psid), _C.allgather_async(values, base + ".values", psid),
             _C.allgather_async(shape, base + ".size", psid)]
    return _Handle(parts, _sparse_finish(tensor, op, _ps_size(process_set, what)))


_sparse_ids = [0]


def _next_sparse_id():
    _sparse_ids[0] += 1
    return _sparse_ids[0]


# -------------------------------------------------------------- broadcast ----

def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Asynchronously returns root_rank's ``tensor`` on every process (the input
    is not modified)."""
    _check_tensor(tensor, "broadcast_async")
    _check_root(root_rank, "broadcast_async")
    psid = _ps_id(process_set, "broadcast_async")
    return _C.broadcast_async(tensor, root_rank, _name(name, "broadcast_async"), False, psid)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place form of broadcast_async(): ``tensor`` receives root's value."""
    _check_tensor(tensor, "broadcast_async_")
    _check_root(root_rank, "broadcast_async_")
    psid = _ps_id(process_set, "broadcast_async_")
    return _C.broadcast_async(tensor, root_rank, _name(name, "broadcast_async_"), True, psid)


class HorovodBroadcast(torch.autograd.Function):
    """Broadcast; the gradient reaches the root only (averaged over ranks, as Horovod)."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        if rank() != ctx.root_rank:
            grad_reduced = grad_reduced * 0
        return grad_reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns root_rank's ``tensor`` on every process. Differentiable."""
    _check_tensor(tensor, "broadcast")
    return HorovodBroadcast.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast; returns ``tensor``."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# --------------------------------------------------------------- alltoall ----

def _splits_list(tensor, splits, what, n=None):
    if splits is None:
        return []
    if isinstance(splits, torch.Tensor):
        # ValueError (not TypeError) for a bad dtype, as Horovod.
        if splits.dim() != 1 or splits.dtype.is_floating_point or splits.dtype.is_complex \
                or splits.dtype == torch.bool:
            raise ValueError("%s: splits must be a 1-D integer tensor or a list of ints, got a %d-D %s tensor"
                             % (what, splits.dim(), splits.dtype))
        values = [int(v) for v in splits.tolist()]
    elif isinstance(splits, (list, tuple)):
        if any(isinstance(v, bool) or not isinstance(v, int) for v in splits):
            raise ValueError("%s: splits must contain ints, got %r" % (what, list(splits)))
        values = list(splits)
    else:
        raise TypeError("%s: splits must be None, a list of ints or an integer tensor, got %s"
                        % (what, type(splits).__name__))
    n = size() if n is None else n
    if len(values) != n:
        raise ValueError("%s: splits has %d entries; it needs one per rank (%d)" % (what, len(values), n))
    if any(v < 0 for v in values):
        raise ValueError("%s: splits must be non-negative, got %s" % (what, values))
    dim0 = tensor.shape[0] if tensor.dim() > 0 else 1
    if sum(values) != dim0:
        raise ValueError("%s: splits sum to %d but the tensor's first dimension is %d" % (what, sum(values), dim0))
    return values


def _alltoall_finish(parts, outputs):
    received = torch.tensor(parts[0].received_splits(), dtype=torch.int32)
    return outputs[0], received


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Asynchronously sends rows of dimension 0 to every process: ``splits[j]``
    rows to rank j (even split when None). synchronize() returns
    ``(output, received_splits)``."""
    _check_tensor(tensor, "alltoall_async")
    psid = _ps_id(process_set, "alltoall_async")
    n = _ps_size(process_set, "alltoall_async")
    values = _splits_list(tensor, splits, "alltoall_async", n)
    if not values:
        dim0 = tensor.shape[0] if tensor.dim() > 0 else 1
        if dim0 % n != 0:
            raise ValueError("alltoall_async: without splits the first dimension (%d) must be divisible by the "
                             "number of ranks (%d)" % (dim0, n))
    part = _C.alltoall_async(tensor, values, _name(name, "alltoall_async"), psid)
    return _Handle([part], _alltoall_finish)


class HorovodAlltoall(torch.autograd.Function):
    """Alltoall; the gradient is the alltoall of the incoming gradient sent back."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received_splits = synchronize(alltoall_async(tensor, splits, name, process_set))
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
    _check_tensor(tensor, "alltoall")
    return HorovodAlltoall.apply(tensor, splits, name, process_set)


# ---------------------------------------------------------- reducescatter ----

def _reducescatter_op(op, what):
    op = _check_op(op, what)
    if op not in (Average, Sum):
        raise ValueError("%s: op must be hvd.Average or hvd.Sum" % what)
    return op


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Asynchronously reduces ``tensor`` across processes and scatters
    dimension 0: rank r keeps its block of rows (the first ``dim0 % size``
    ranks get one row more)."""
    what = "reducescatter_async"
    _check_tensor(tensor, what)
    psid = _ps_id(process_set, what)
    op = _reducescatter_op(op, what)
    if tensor.dim() == 0:
        raise ValueError("%s: the tensor needs at least one dimension" % what)
    pre = _check_factor(prescale_factor, what, "prescale_factor")
    post = _check_factor(postscale_factor, what, "postscale_factor")
    return _C.reducescatter_async(tensor, _name(name, what), op, pre, post, psid)


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
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        grad = _reducescatter_grad(grad_output, ctx.op, ctx.prescale_factor, ctx.postscale_factor,
                                   ctx.process_set)
        return grad, None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces ``tensor`` across processes and returns this rank's block of
    dimension 0. Differentiable."""
    _check_tensor(tensor, "reducescatter")
    compressed, ctx = compression.compress(tensor)
    out = HorovodReducescatter.apply(compressed, name, op, process_set, prescale_factor, postscale_factor)
    return compression.decompress(out, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Asynchronous reducescatter of a list of tensors; synchronize() returns a list."""
    what = "grouped_reducescatter_async"
    _check_tensors(tensors, what)
    psid = _ps_id(process_set, what)
    names = _group_names(name, len(tensors), what)
    op = _reducescatter_op(op, what)
    for t in tensors:
        if t.dim() == 0:
            raise ValueError("%s: every tensor needs at least one dimension" % what)
    pre = _check_factor(prescale_factor, what, "prescale_factor")
    post = _check_factor(postscale_factor, what, "postscale_factor")
    return _Handle(_C.grouped_reducescatter_async(list(tensors), names, op, pre, post, psid), _grouped)


class HorovodGroupedReducescatter(torch.autograd.Function):
    """Grouped reducescatter with HorovodReducescatter's gradient for each tensor."""

    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.op = op
        ctx.process_set = process_set
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        return tuple(synchronize(grouped_reducescatter_async(list(tensors), name, op, process_set,
                                                             prescale_factor, postscale_factor)))

    @staticmethod
    def backward(ctx, *grad_output):
        grads = [_reducescatter_grad(g, ctx.op, ctx.prescale_factor, ctx.postscale_factor, ctx.process_set)
                 for g in grad_output]
        return (None, None, None, None, None) + tuple(grads)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reducescatter of a list of tensors; returns a list. Differentiable."""
    _check_tensors(tensors, "grouped_reducescatter")
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors])
    outs = HorovodGroupedReducescatter.apply(name, op, process_set, prescale_factor, postscale_factor,
                                             *compressed)
    return [compression.decompress(t, c) for t, c in zip(outs, ctxs)]


# ------------------------------------------------------- join and barrier ----

def join(device=-1):
    """This rank has no more data. Until every rank has joined, the others'
    allreduces proceed with this rank contributing zeros. Blocks until all
    ranks have joined and returns the rank that joined last."""
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError("join: device must be an int, got %s" % type(device).__name__)
    if device >= 0:
        raise NotImplementedError("join: only CPU (device=-1) is supported")
    handle = _C.join_async()
    handle.synchronize()
    return handle.last_joined_rank()


def barrier(process_set=global_process_set):
    """Blocks until every rank has reached the barrier."""
    _C.barrier(_ps_id(process_set, "barrier"))
