"""Batch normalisation with statistics computed over every worker's batch."""

from __future__ import annotations

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from fuse.collectives.ops import Sum
from fuse.job.process_sets import global_process_set
from fuse.frameworks.torch import mpi_ops


class SyncBatchNorm(_BatchNorm):
    """``torch.nn.BatchNorm*d`` whose training-mode mean and variance are taken over the
    batches of all members of ``process_set``.  Works on any input of shape (N, C, ...); in
    eval mode, or alone in its set, it is plain batch norm.

    The statistics travel as one differentiable allreduce (Sum) of [sum, sum of squares,
    count], so the backward pass sums the statistics' gradients over the workers as well."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        if not self.training or len(self.process_set.ranks) == 1:
            return super().forward(input)
        if self.momentum is None:
            factor = None
        else:
            factor = self.momentum
        if self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if factor is None:
                factor = 1.0 / float(self.num_batches_tracked)
        c = input.shape[1]
        dims = [0] + list(range(2, input.dim()))
        x = input
        count = torch.full((1,), float(x.numel() // c), dtype=x.dtype, device=x.device)
        local = torch.cat([x.sum(dims), (x * x).sum(dims), count])
        total = mpi_ops.allreduce(local, op=Sum, process_set=self.process_set)
        n = total[2 * c]
        mean = total[:c] / n
        var = total[c:2 * c] / n - mean * mean
        shape = [1, c] + [1] * (x.dim() - 2)
        y = (x - mean.view(shape)) * torch.rsqrt(var + self.eps).view(shape)
        if self.affine:
            y = y * self.weight.view(shape) + self.bias.view(shape)
        if self.track_running_stats and self.running_mean is not None:
            with torch.no_grad():
                unbiased = var * (n / torch.clamp(n - 1, min=1))
                self.running_mean.mul_(1 - factor).add_(mean.detach(), alpha=factor)
                self.running_var.mul_(1 - factor).add_(unbiased.detach(), alpha=factor)
        return y


