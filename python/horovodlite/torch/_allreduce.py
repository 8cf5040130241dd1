"""allreduce and grouped_allreduce in their Horovod forms (synchronous,
asynchronous, in place, differentiable). Each resolves Horovod's ``op`` /
``average`` (resolve_op) and enqueues through _enqueue.py, which checks the
arguments once, as DistributedOptimizer's hooks do."""

import torch

from horovodlite.common.process_sets import global_process_set
from horovodlite.torch._checks import check_tensor, check_tensors, resolve_op
from horovodlite.torch._enqueue import enqueue_allreduce, enqueue_grouped_allreduce
from horovodlite.torch.basics import Average, Max, Min, Sum
from horovodlite.torch.compression import WIRE_COMPRESSIONS, Compression, check_compressible
from horovodlite.torch.handles import _Handle, synchronize

_CORE_FP16_OPS = frozenset((Sum, Average, Min, Max))
_NONE = Compression.none


def core_fp16(tensor, compression, op, prescale_factor, postscale_factor):
    """Whether ``compression`` is Horovod's fp16 compression (or its bf16 twin)
    of a tensor that the core converts to fp16 (bf16) while packing it for the
    wire (float32): no 16-bit copy in Python, the result in the tensor's dtype.
    Taken where the result is the one Horovod's compress / fp16 allreduce /
    decompress gives (the core rounds Average's quotient to fp16 or bf16 as
    Horovod does to fp16); a prescale factor (which the core applies before the
    conversion, keeping precision Horovod loses) or a postscale factor takes the
    Python compressor."""
    if compression not in WIRE_COMPRESSIONS or not isinstance(tensor, torch.Tensor):
        return False
    if tensor.dtype is not torch.float32:
        # float64: torch (hence Horovod's compressor) rounds to fp16/bf16
        # through float32, the core rounds once; rare enough to keep Horovod's path.
        return False
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        return False
    return type(op) is int and op in _CORE_FP16_OPS


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set, compression=Compression.none):
    """Asynchronously averages (or sums, ...) ``tensor`` over all processes; the
    input is not modified. Returns a handle for poll()/synchronize().
    ``compression=hvd.Compression.fp16`` or ``.bf16`` (a horovodlite extension;
    Horovod's allreduce_async has no compression argument) sends float32/float64
    tensors as fp16 (bf16) and returns the result in the tensor's dtype, as
    allreduce() does."""
    op = resolve_op(op, average, "allreduce_async")
    if compression is _NONE or core_fp16(tensor, compression, op, prescale_factor, postscale_factor):
        return enqueue_allreduce(tensor, name, op, process_set, prescale_factor, postscale_factor, False, compression,
                                 None, "allreduce_async")
    check_tensor(tensor, "allreduce_async")  # before the compressor sees it
    check_compressible((tensor,), compression, name, "allreduce_async")
    compressed, ctx = compression.compress(tensor)
    handle = enqueue_allreduce(compressed, name, op, process_set, prescale_factor, postscale_factor, False, _NONE,
                               None, "allreduce_async")
    return _Handle([handle], lambda parts, outputs: compression.decompress(outputs[0], ctx))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """In-place form of allreduce_async(): ``tensor`` receives the result."""
    # The per-parameter loop's call: resolve_op only when there is something to resolve.
    if op is None or average is not None:
        op = resolve_op(op, average, "allreduce_async_")
    return enqueue_allreduce(tensor, name, op, process_set, prescale_factor, postscale_factor, True, _NONE, None,
                             "allreduce_async_")


class HorovodAllreduce(torch.autograd.Function):
    """Allreduce whose gradient is the same allreduce of the incoming gradient."""

    @staticmethod
    def forward(ctx, tensor, average, name, op, prescale_factor, postscale_factor, process_set):
        ctx.op = resolve_op(op, average, "allreduce")
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        return enqueue_allreduce(tensor, name, ctx.op, process_set, prescale_factor, postscale_factor, False, _NONE,
                                 None, "allreduce").synchronize()

    @staticmethod
    def backward(ctx, grad_output):
        return (allreduce(grad_output, op=ctx.op, prescale_factor=ctx.prescale_factor,
                          postscale_factor=ctx.postscale_factor, process_set=ctx.process_set),
                None, None, None, None, None, None)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Averages (or sums, ...) ``tensor`` over all processes and returns the
    result; the input is not modified. Differentiable."""
    op = resolve_op(op, average, "allreduce")
    if not (torch.is_grad_enabled() and isinstance(tensor, torch.Tensor) and tensor.requires_grad):
        # No graph to record: straight to the core, the output from the
        # adapter's pool, fp16 converted by the core.
        if compression is _NONE or core_fp16(tensor, compression, op, prescale_factor, postscale_factor):
            return enqueue_allreduce(tensor, name, op, process_set, prescale_factor, postscale_factor, False,
                                     compression, None, "allreduce").synchronize()
    if compression is not _NONE:
        check_tensor(tensor, "allreduce")  # before the compressor sees it
        check_compressible((tensor,), compression, name, "allreduce")
    tensor_compressed, ctx = compression.compress(tensor)
    reduced = HorovodAllreduce.apply(tensor_compressed, None, name, op, prescale_factor, postscale_factor,
                                     process_set)
    return compression.decompress(reduced, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """In-place allreduce; returns ``tensor``."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor,
                                        process_set))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Asynchronous allreduce of a list of tensors (fused together when they fit
    the fusion buffer); synchronize() returns the list of results."""
    op = resolve_op(op, average, "grouped_allreduce_async")
    return enqueue_grouped_allreduce(tensors, name, op, process_set, prescale_factor, postscale_factor, False,
                                     "grouped_allreduce_async")


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """In-place form of grouped_allreduce_async()."""
    op = resolve_op(op, average, "grouped_allreduce_async_")
    return enqueue_grouped_allreduce(tensors, name, op, process_set, prescale_factor, postscale_factor, True,
                                     "grouped_allreduce_async_")


class HorovodGroupedAllreduce(torch.autograd.Function):
    """Grouped allreduce; each gradient is the grouped allreduce of the incoming ones."""

    @staticmethod
    def forward(ctx, average, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.op = resolve_op(op, average, "grouped_allreduce")
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        handle = enqueue_grouped_allreduce(list(tensors), name, ctx.op, process_set, prescale_factor,
                                           postscale_factor, False, "grouped_allreduce")
        return tuple(synchronize(handle))

    @staticmethod
    def backward(ctx, *grad_output):
        grads = grouped_allreduce(list(grad_output), op=ctx.op, prescale_factor=ctx.prescale_factor,
                                  postscale_factor=ctx.postscale_factor, process_set=ctx.process_set)
        return (None, None, None, None, None, None) + tuple(grads)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Allreduce of a list of tensors; returns the list of results. Differentiable."""
    check_tensors(tensors, "grouped_allreduce")  # before they are unpacked and compressed
    check_compressible(tensors, compression, name, "grouped_allreduce")
    op = resolve_op(op, average, "grouped_allreduce")
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors])
    reduced = HorovodGroupedAllreduce.apply(None, name, op, prescale_factor, postscale_factor, process_set,
                                            *compressed)
    return [compression.decompress(t, c) for t, c in zip(reduced, ctxs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    """In-place grouped allreduce; returns the list of (input) tensors."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))
