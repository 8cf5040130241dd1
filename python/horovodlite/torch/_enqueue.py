"""The one way from Python into the core's allreduce.

Every allreduce caller (``allreduce``, ``allreduce_async``, ``allreduce_async_``
and DistributedOptimizer's gradient hooks) enqueues through
``enqueue_allreduce``, so every one gets the same checks: the tensor (a dense
torch.Tensor), the name, the reduce op, the scale factors, the process set,
the compression and the output buffer. The adapter and the core then check the
tensor's dtype, device and size once, with errors that name the tensor.

The checks put the common case first (a str name, float factors, a plain op,
the global set: one type test each), so the in-place form that the optimizer
and per-parameter loops call 200 times a step costs what the unchecked call
cost before. The binding is called positionally: pybind11 matches keyword
arguments by name on every call, which measured about 1 us more per call (2.3
vs 3.3 us, best of 30 rounds of 200 calls). Besides enqueue_allreduce, one
other place calls it: allreduce_async_'s plain case (_allreduce.py), which
makes these checks itself to save the frames in between.
"""

import torch

from horovodlite.common.process_sets import _ps_id, global_process_set
from horovodlite.torch import _C
from horovodlite.torch._checks import _PLAIN_OPS, check_factor, check_name, check_op
from horovodlite.torch.compression import Compression

# Looked up once (module globals are cheaper than attribute chains per call).
_Tensor = torch.Tensor
_float32 = torch.float32
_float64 = torch.float64
_NONE = Compression.none
_FP16 = Compression.fp16
_allreduce_async = _C.allreduce_async


def enqueue_allreduce(tensor, *, name, op, process_set=global_process_set, prescale_factor=1.0,
                      postscale_factor=1.0, in_place=False, compression=Compression.none, output=None,
                      what="allreduce"):
    """Starts the allreduce of ``tensor`` and returns its core handle.

    Arguments (keyword only):
        name: a str, or None for a name the core makes up.
        op: a resolved reduce op (hvd.Average, Sum, Min, Max, Product).
        process_set: the hvd.ProcessSet whose ranks take part.
        prescale_factor, postscale_factor: numbers.
        in_place: write the result into ``tensor``.
        compression: Compression.none, or Compression.fp16 to send float32 and
            float64 as fp16, converted inside the core while packing (no fp16
            copy; the result has the input's dtype; other dtypes go as they
            are). Other compressors compress before calling.
        output (out of place only): the tensor to write the result into (same
            shape and dtype as ``tensor``), e.g. a buffer reused from step to
            step; None: a new tensor.
        what: the public function's name, for error messages.
    """
    if not isinstance(tensor, _Tensor):
        raise TypeError("%s: expected a torch.Tensor, got %s" % (what, type(tensor).__name__))
    if tensor.is_sparse:
        raise ValueError("%s: sparse tensors are not supported (use sparse_as_dense=True or .to_dense())" % what)
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
        fp16_wire = False
    elif compression is _FP16:
        fp16_wire = tensor.dtype is _float32 or tensor.dtype is _float64
    else:
        raise ValueError("%s: the core compresses only with Compression.fp16; compress other ways before "
                         "calling" % what)
    if output is not None:
        if in_place:
            raise ValueError("%s: an output tensor cannot be given to the in-place form" % what)
        if not isinstance(output, _Tensor) or output.is_sparse:
            raise TypeError("%s: output must be a dense torch.Tensor, got %s" % (what, type(output).__name__))
    # _C.allreduce_async(tensor, name, op, prescale_factor, postscale_factor,
    #                    in_place, fp16_wire, output, process_set_id)
    return _allreduce_async(tensor, name, op, prescale_factor, postscale_factor, in_place, fp16_wire, output,
                            psid)


def enqueue_grouped_allreduce(tensors, *, names, op, process_set=global_process_set, prescale_factor=1.0,
                              postscale_factor=1.0, in_place=False, what="grouped_allreduce"):
    """Starts the allreduce of a list of tensors as one group (negotiated and
    executed together, Horovod's group_id); returns one core handle per tensor.
    The caller has checked the tensors and made the names."""
    op = check_op(op, what)
    pre = check_factor(prescale_factor, what, "prescale_factor")
    post = check_factor(postscale_factor, what, "postscale_factor")
    psid = _ps_id(process_set, what)
    return _C.grouped_allreduce_async(list(tensors), names, op, pre, post, bool(in_place), psid)
