"""The one way from Python into the core: every collective of horovodlite.torch
(the public functions, their autograd forms, DistributedOptimizer, the sparse
allreduce) reaches ``_C`` through a function here, and each function checks its
arguments once, here, before anything is enqueued (so a bad argument leaves
every rank in step). ``what`` is the public function's name, for the errors.

Who checks what (one contract at each boundary):

- here, what only Python can check: the argument types (a dense torch.Tensor or
  a non-empty list of them, a str or None name, numbers for the scale factors,
  an int root rank, splits as ints), the reduce op's value (one of hvd.Average,
  Sum, ...; reducescatter and the sparse allreduce: Average or Sum, as Horovod),
  the process set object (a registered hvd.ProcessSet), the compression and the
  output buffer;
- ``_C`` (python/src/module.cc) converts them for the LibTorch adapter;
- the core (horovodlite/src/api.cc, api_checks.cc) checks the values: dtype,
  device, dimensions, finite scale factors, Adasum's dtypes and power-of-two
  number of ranks, the root rank's range and membership of the set, alltoall's
  splits (one per rank, not negative, summing to dim 0; without splits, dim 0
  divisible by the number of ranks), reducescatter's dimension, and at
  negotiation what ranks disagree about. Its errors name the tensor: those of
  its argument checks are raised at the call (ValueError for a bad argument),
  what ranks disagree about when the handle is synchronized.

The checks put the common case first (a str name, float factors, a plain op,
the global set: one type test each), so the in-place allreduce that the
optimizer and per-parameter loops call for every parameter of every step costs
little more than the binding. The bindings are called positionally: pybind11
matches keyword arguments by name on every call (the cost:
docs/results/2026-11-python.md); the hot callers call enqueue_allreduce
positionally too (a Python call with keywords costs a little more).
"""

import torch

from horovodlite.common.process_sets import _ps_id, global_process_set
from horovodlite.torch import _C
from horovodlite.torch._checks import (
    _PLAIN_OPS,
    check_factor,
    check_name,
    check_op,
    check_reducescatter_op,
    check_root_type,
    check_tensor,
    check_tensors,
    group_names,
    splits_list,
)
from horovodlite.torch.compression import Compression, check_compressible
from horovodlite.torch.handles import _grouped, _Handle

# Looked up once (module globals are cheaper than attribute chains per call).
_Tensor = torch.Tensor
_NONE = Compression.none
# The core's wire compression for each compressor it applies itself.
_WIRE = {Compression.none: _C.COMPRESSION_NONE, Compression.fp16: _C.COMPRESSION_FP16,
         Compression.bf16: _C.COMPRESSION_BF16}
_allreduce_async = _C.allreduce_async


def enqueue_allreduce(tensor, name, op, process_set, prescale_factor, postscale_factor, in_place, compression,
                      output, what):
    """Starts the allreduce of ``tensor`` and returns its core handle.

    Arguments:
        name: a str, or None for a name the core makes up.
        op: a reduce op (hvd.Average, Sum, Min, Max, Product, Adasum; the
            public functions resolve None and ``average`` first).
        process_set: the hvd.ProcessSet whose ranks take part.
        prescale_factor, postscale_factor: numbers.
        in_place: write the result into ``tensor``.
        compression: Compression.none, or Compression.fp16 (bf16) to send
            float32 and float64 as fp16 (bf16), converted inside the core while
            packing (no 16-bit copy; the result has the input's dtype; with
            fp16 other dtypes go as they are, bf16 refuses those that are not
            floating point). Other compressors compress before calling.
        output (out of place only): the tensor to write the result into (same
            shape and dtype as ``tensor``), e.g. a buffer reused from step to
            step; None: a new tensor.
        what: the public function's name, for error messages.
    """
    if not isinstance(tensor, _Tensor) or tensor.is_sparse:
        check_tensor(tensor, what)
    if type(name) is not str:
        name = check_name(name, what)
    if type(op) is not int or op not in _PLAIN_OPS:
        op = check_op(op, what)
    if type(prescale_factor) is not float:
        prescale_factor = check_factor(prescale_factor, what, "prescale_factor")
    if type(postscale_factor) is not float:
        postscale_factor = check_factor(postscale_factor, what, "postscale_factor")
    psid = 0 if process_set is global_process_set else _ps_id(process_set, what)
    if compression is _NONE:
        wire = 0
    else:
        wire = _WIRE.get(compression)
        if wire is None:
            raise ValueError("%s: the core compresses only with Compression.fp16 or Compression.bf16; compress "
                             "other ways before calling" % what)
        check_compressible((tensor,), compression, name, what)
    if output is not None:
        if in_place:
            raise ValueError("%s: an output tensor cannot be given to the in-place form" % what)
        if not isinstance(output, _Tensor) or output.is_sparse:
            raise TypeError("%s: output must be a dense torch.Tensor, got %s" % (what, type(output).__name__))
    # _C.allreduce_async(tensor, name, op, prescale_factor, postscale_factor,
    #                    in_place, wire, output, process_set_id)
    return _allreduce_async(tensor, name, op, prescale_factor, postscale_factor, in_place, wire, output,
                            psid)


def enqueue_grouped_allreduce(tensors, name, op, process_set, prescale_factor, postscale_factor, in_place, what):
    """Starts the allreduce of a list of tensors as one group (negotiated and
    executed together, Horovod's group_id; names ``name.0``, ``name.1``, ...);
    synchronize() returns the list of results."""
    check_tensors(tensors, what)
    names = group_names(name, len(tensors), what)
    op = check_op(op, what)
    pre = check_factor(prescale_factor, what, "prescale_factor")
    post = check_factor(postscale_factor, what, "postscale_factor")
    psid = _ps_id(process_set, what)
    return _Handle(_C.grouped_allreduce_async(list(tensors), names, op, pre, post, bool(in_place), psid), _grouped)


def enqueue_allgather(tensor, name, process_set, what):
    """Starts the allgather of ``tensor`` (along dimension 0); returns its core handle."""
    check_tensor(tensor, what)
    psid = _ps_id(process_set, what)
    return _C.allgather_async(tensor, check_name(name, what), psid)


def enqueue_grouped_allgather(tensors, name, process_set, what):
    """Starts the allgather of a list of tensors as one group; synchronize() returns a list."""
    check_tensors(tensors, what)
    psid = _ps_id(process_set, what)
    names = group_names(name, len(tensors), what)
    return _Handle(_C.grouped_allgather_async(list(tensors), names, psid), _grouped)


def enqueue_broadcast(tensor, root_rank, name, process_set, in_place, what):
    """Starts the broadcast of root_rank's (a global rank's) ``tensor``; returns its core handle."""
    check_tensor(tensor, what)
    check_root_type(root_rank, what)
    psid = _ps_id(process_set, what)
    return _C.broadcast_async(tensor, root_rank, check_name(name, what), in_place, psid)


def _alltoall_finish(parts, outputs):
    # On the output's device, as Horovod returns them (a CUDA tensor's on its GPU).
    received = torch.tensor(parts[0].received_splits(), dtype=torch.int32, device=outputs[0].device)
    return outputs[0], received


def enqueue_alltoall(tensor, splits, name, process_set, what):
    """Starts the alltoall of ``tensor``'s rows (``splits[j]`` to rank j; None:
    even); synchronize() returns ``(output, received_splits)``."""
    check_tensor(tensor, what)
    psid = _ps_id(process_set, what)
    values = splits_list(splits, what)
    part = _C.alltoall_async(tensor, values, check_name(name, what), psid)
    return _Handle([part], _alltoall_finish)


def enqueue_reducescatter(tensor, name, op, process_set, prescale_factor, postscale_factor, what):
    """Starts the reducescatter of ``tensor`` (Average or Sum); returns its core handle."""
    check_tensor(tensor, what)
    psid = _ps_id(process_set, what)
    op = check_reducescatter_op(op, what)
    pre = check_factor(prescale_factor, what, "prescale_factor")
    post = check_factor(postscale_factor, what, "postscale_factor")
    return _C.reducescatter_async(tensor, check_name(name, what), op, pre, post, psid)


def enqueue_grouped_reducescatter(tensors, name, op, process_set, prescale_factor, postscale_factor, what):
    """Starts the reducescatter of a list of tensors as one group; synchronize() returns a list."""
    check_tensors(tensors, what)
    psid = _ps_id(process_set, what)
    names = group_names(name, len(tensors), what)
    op = check_reducescatter_op(op, what)
    pre = check_factor(prescale_factor, what, "prescale_factor")
    post = check_factor(postscale_factor, what, "postscale_factor")
    return _Handle(_C.grouped_reducescatter_async(list(tensors), names, op, pre, post, psid), _grouped)


def enqueue_join():
    """Starts this rank's join; returns its core handle."""
    return _C.join_async()


def run_barrier(process_set, what):
    """Waits until every rank of the set has reached the barrier."""
    _C.barrier(_ps_id(process_set, what))
