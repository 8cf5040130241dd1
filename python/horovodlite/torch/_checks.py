"""The Python-side argument checks of the collectives, made once per call by
_enqueue.py (which says who checks what): argument types and the reduce op's
value. The values of the tensor and of the other arguments (dtype, device,
size, root rank range, splits, ...) are the core's to check, whose errors name
the tensor. Also Horovod's ``average`` rule (resolve_op), which the public
allreduce functions apply before enqueueing."""

import warnings

import torch

from horovodlite.common.exceptions import HorovodInternalError
from horovodlite.torch.basics import _OPS, Adasum, Average, Sum, size

# Reduce ops accepted at once (Adasum goes through the rest of check_op).
_PLAIN_OPS = frozenset(op for op in _OPS if op != Adasum)


def check_tensor(tensor, what):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("%s: expected a torch.Tensor, got %s" % (what, type(tensor).__name__))
    if tensor.is_sparse:
        raise ValueError("%s: sparse tensors are not supported (use sparse_as_dense=True or .to_dense())" % what)


def check_tensors(tensors, what):
    if isinstance(tensors, torch.Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError("%s: expected a list or tuple of torch.Tensor, got %s" % (what, type(tensors).__name__))
    if len(tensors) == 0:  # before the callers unpack it (zip(*[]) has nothing to unpack)
        raise ValueError("%s: the list of tensors is empty" % what)
    for t in tensors:
        check_tensor(t, what)


def check_name(name, what):
    """The name the core gets: "" for None (the core makes one up)."""
    if name is None:
        return ""
    if not isinstance(name, str):
        raise TypeError("%s: name must be a str or None, got %s" % (what, type(name).__name__))
    return name


def group_names(name, count, what):
    base = check_name(name, what)
    if not base:
        return [""] * count
    return ["%s.%d" % (base, i) for i in range(count)]


def check_root_type(root_rank, what):
    if isinstance(root_rank, bool) or not isinstance(root_rank, int):
        raise TypeError("%s: root_rank must be an int, got %s" % (what, type(root_rank).__name__))


def check_root(root_rank, what):
    """The root rank of a composite operation (broadcast_parameters, ...),
    checked before any of its collectives or local work starts."""
    check_root_type(root_rank, what)
    n = size()
    if not 0 <= root_rank < n:
        raise ValueError("%s: root_rank %d is out of range [0, %d)" % (what, root_rank, n))


def check_factor(value, what, arg):
    if type(value) is float:  # the common case, first
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("%s: %s must be a number, got %s" % (what, arg, type(value).__name__))
    return float(value)


def resolve_op(op, average, what):
    """Horovod's handling of the deprecated ``average`` argument: the op to
    use (None: Average). The op itself is checked where it is enqueued."""
    if average is None:  # the common case, first
        return Average if op is None else op
    if op is not None:
        raise ValueError("%s: the op parameter supersedes average. Please provide only one of them." % what)
    warnings.warn("Parameter `average` has been replaced with `op` and will be removed",
                  DeprecationWarning, stacklevel=3)
    return Average if average else Sum


def check_op(op, what):
    if type(op) is int and op in _PLAIN_OPS:  # the common case, first
        return op
    if isinstance(op, bool) or not isinstance(op, int) or op not in _OPS:
        raise ValueError("%s: op must be one of hvd.Average, Sum, Min, Max, Product (got %r)" % (what, op))
    return op


def check_average_or_sum(op, what):
    """reducescatter's and the sparse allreduce's ops (as Horovod)."""
    if type(op) is int and (op == Average or op == Sum):
        return op
    raise ValueError("%s: op must be hvd.Average or hvd.Sum (got %r)" % (what, op))


def check_reducescatter_op(op, what):
    """reducescatter's op: Average or Sum. Another reduce op (Adasum, Min, Max,
    Product) is HorovodInternalError, a RuntimeError, as Horovod's core refuses
    it (Status::Aborted, raised as HorovodInternalError); a value that is no op
    at all stays a ValueError."""
    if type(op) is int and (op == Average or op == Sum):
        return op
    if type(op) is int and op in _OPS:
        raise HorovodInternalError("%s: Reducescatter currently only supports SUM (hvd.Sum, or hvd.Average: a SUM, "
                                   "then a division); got hvd.%s" % (what, _OPS[op]))
    raise ValueError("%s: op must be hvd.Average or hvd.Sum (got %r)" % (what, op))


def splits_list(splits, what):
    """alltoall's splits as the list of ints the core takes ([]: an even
    split); their values (one per rank, not negative, summing to dim 0) are the
    core's to check."""
    if splits is None:
        return []
    if isinstance(splits, torch.Tensor):
        # ValueError (not TypeError) for a bad dtype, as Horovod.
        if splits.dim() != 1 or splits.dtype.is_floating_point or splits.dtype.is_complex \
                or splits.dtype == torch.bool:
            raise ValueError("%s: splits must be a 1-D integer tensor or a list of ints, got a %d-D %s tensor"
                             % (what, splits.dim(), splits.dtype))
        return [int(v) for v in splits.tolist()]
    if isinstance(splits, (list, tuple)):
        if any(isinstance(v, bool) or not isinstance(v, int) for v in splits):
            raise ValueError("%s: splits must contain ints, got %r" % (what, list(splits)))
        return list(splits)
    raise TypeError("%s: splits must be None, a list of ints or an integer tensor, got %s"
                    % (what, type(splits).__name__))
