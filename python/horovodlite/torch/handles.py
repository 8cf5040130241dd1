"""Handles of asynchronous operations, as ``horovod.torch.mpi_ops``'s
``poll(handle)`` and ``synchronize(handle)``.

An operation with one core handle and nothing to do after it (allreduce,
broadcast, reducescatter) returns the core handle itself (``_C.Handle``, which
caches its result): no Python object per tensor, nothing for the cyclic
garbage collector to track (issue 19: 200 tensors per round made it run every
few rounds). Operations with several parts or a finishing function return a
``_Handle``, which can also be called (``handle()``) to wait for the result, as
the function Horovod's ``sparse_allreduce_async`` returns.
"""

from horovodlite.torch import _C

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

    def __call__(self):
        """Waits for the operation and returns its result (as synchronize(self))."""
        return synchronize(self)

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
    if isinstance(handle, _Handle):
        if not handle._done:
            outputs = [p.synchronize() for p in handle._parts]
            handle._result = handle._finish(handle._parts, outputs)
            handle._done = True
            handle._finish = None
        return handle._result
    if callable(handle):  # a function that waits (Horovod's sparse handles, the optimizer's)
        return handle()
    raise TypeError("synchronize: expected a handle returned by a horovodlite *_async function, got %s"
                    % type(handle).__name__)


def _grouped(parts, outputs):
    return list(outputs)
