"""Gradient compression, as ``horovod.torch.compression``."""

import torch


class Compressor:
    """Interface for compressing and decompressing a given tensor."""

    @staticmethod
    def compress(tensor):
        """Compresses a tensor and returns it with the context needed to decompress it."""
        pass

    @staticmethod
    def decompress(tensor, ctx):
        """Decompresses the tensor with the given context."""
        pass


class NoneCompressor(Compressor):
    """Default no-op compression."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Floating tensors travel as float16 and are cast back to their dtype."""

    @staticmethod
    def compress(tensor):
        tensor_compressed = tensor
        if tensor.dtype.is_floating_point:
            tensor_compressed = tensor.type(torch.float16)
        return tensor_compressed, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        dtype = ctx
        if dtype.is_floating_point:
            return tensor.type(dtype)
        return tensor


class BF16Compressor(Compressor):
    """Floating tensors travel as bfloat16 (float32's range, 8 significant bits)
    and are cast back to their dtype. Unlike fp16, a tensor that is not floating
    point is refused (bf16 cannot hold it exactly, and passing it through
    uncompressed would hide the mistake): see check_compressible()."""

    @staticmethod
    def compress(tensor):
        if not tensor.dtype.is_floating_point:
            raise TypeError("Compression.bf16 compresses floating-point tensors only, got %s" % tensor.dtype)
        return tensor.type(torch.bfloat16), tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        return tensor.type(ctx)


class Compression:
    """Optional gradient compression algorithm used during allreduce."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor


# The compressors the core applies itself while packing for the wire.
WIRE_COMPRESSIONS = (Compression.fp16, Compression.bf16)


def check_compressible(tensors, compression, name, what):
    """Raises TypeError, naming the tensor, if ``compression`` refuses one of
    ``tensors`` (Compression.bf16 and a tensor that is not floating point)."""
    if compression is not Compression.bf16:
        return
    for i, t in enumerate(tensors):
        if isinstance(t, torch.Tensor) and not t.dtype.is_floating_point:
            label = ("'%s'" % name) if name is not None else "(unnamed)"
            if len(tensors) > 1:
                label += " [%d]" % i
            raise TypeError("%s: Compression.bf16 compresses floating-point tensors only; tensor %s is %s"
                            % (what, label, t.dtype))
