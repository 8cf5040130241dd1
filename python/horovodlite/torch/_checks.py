"""Argument checks shared by the collectives: Python checks what only Python
can (argument types, Horovod's op and ``average`` rules, root ranks); the
tensor itself (dtype, device, layout, size) is checked once, by the adapter and
the core, whose errors name the tensor."""

import warnings

import torch

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
    if len(tensors) == 0:
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


def check_root(root_rank, what):
    if isinstance(root_rank, bool) or not isinstance(root_rank, int):
        raise TypeError("%s: root_rank must be an int, got %s" % (what, type(root_rank).__name__))
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
    return check_op(op, what)


def check_op(op, what):
    if type(op) is int and op in _PLAIN_OPS:  # the common case, first
        return op
    if isinstance(op, bool) or not isinstance(op, int) or op not in _OPS:
        raise ValueError("%s: op must be one of hvd.Average, Sum, Min, Max, Product (got %r)" % (what, op))
    return op
