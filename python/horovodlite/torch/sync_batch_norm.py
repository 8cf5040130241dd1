"""SyncBatchNorm, as ``horovod.torch.sync_batch_norm``: batch normalization
whose batch statistics are computed over the samples of every rank."""

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from horovodlite.torch.mpi_ops import Sum, allreduce, size


class SyncBatchNorm(_BatchNorm):
    """Applies synchronous batch normalization: in training, mean and variance
    are those of the global batch (all ranks' samples); in evaluation the
    running statistics are used, as in torch.nn.BatchNorm*d.

    Arguments are those of torch.nn.BatchNorm1d/2d/3d; the input is
    (N, C, *) with at least 2 dimensions.
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def _run_bn(self, input):
        return super().forward(input)

    def forward(self, input):
        self._check_input_dim(input)
        if not self.training or size() == 1:
            return self._run_bn(input)
        exponential_average_factor = 0.0
        if self.track_running_stats:
            self.num_batches_tracked = self.num_batches_tracked + 1
            if self.momentum is None:  # cumulative moving average
                exponential_average_factor = 1.0 / float(self.num_batches_tracked)
            else:
                exponential_average_factor = self.momentum
        return _SyncBatchNormFunction.apply(input, self.weight, self.bias, self.running_mean, self.running_var,
                                            self.eps, exponential_average_factor)


def _per_channel(t):
    # (N, C, *) -> (C, N * prod(*)) view for per-channel reductions.
    return t.transpose(0, 1).reshape(t.shape[1], -1)


def _expand(v, like):
    return v.reshape([1, -1] + [1] * (like.dim() - 2))


class _SyncBatchNormFunction(torch.autograd.Function):

    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum):
        x = input.contiguous()
        xc = _per_channel(x)
        channels = xc.shape[0]
        local = torch.cat([xc.sum(1), (xc * xc).sum(1),
                           torch.tensor([float(xc.shape[1])], dtype=x.dtype)])
        total = allreduce(local, op=Sum, name=None)
        count = total[-1]
        if count.item() <= 1:
            raise ValueError("SyncBatchNorm: expected more than 1 value per channel in training (got %d)"
                             % int(count.item()))
        mean = total[:channels] / count
        var = (total[channels:2 * channels] / count - mean * mean).clamp_min(0)
        invstd = torch.rsqrt(var + eps)
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype) * momentum)
        if running_var is not None:
            unbiased = var * count / (count - 1)
            running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype) * momentum)
        out = (x - _expand(mean, x)) * _expand(invstd, x)
        if weight is not None:
            out = out * _expand(weight, x) + _expand(bias, x)
        ctx.save_for_backward(x, weight, mean, invstd, count)
        return out

    @staticmethod
    def backward(ctx, grad_output):
        x, weight, mean, invstd, count = ctx.saved_tensors
        dy = grad_output.contiguous()
        xmu = x - _expand(mean, x)
        sum_dy = _per_channel(dy).sum(1)
        sum_dy_xmu = _per_channel(dy * xmu).sum(1)
        channels = sum_dy.shape[0]
        total = allreduce(torch.cat([sum_dy, sum_dy_xmu]), op=Sum, name=None)
        g_sum_dy, g_sum_dy_xmu = total[:channels], total[channels:]
        scale = invstd if weight is None else invstd * weight
        grad_input = _expand(scale, x) * (dy - _expand(g_sum_dy / count, x)
                                          - xmu * _expand(invstd * invstd * g_sum_dy_xmu / count, x))
        grad_weight = grad_bias = None
        if weight is not None:
            grad_weight = sum_dy_xmu * invstd
            grad_bias = sum_dy
        return grad_input, grad_weight, grad_bias, None, None, None, None
