"""Models for the Spark estimator tests, in a module of their own so that the ranks and the
executors import them by name (the test modules import pytest fixtures and checks)."""

import torch


class RaisesOnRankOne(torch.nn.Module):
    """A linear model whose forward pass raises on rank 1 (and only there)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(2, 1)

    def forward(self, x):
        import fuse
        if fuse.is_initialized() and fuse.rank() == 1:
            raise ValueError("rank one cannot take this batch")
        return self.linear(x)


class TwoInputs(torch.nn.Module):
    """y = a * x1 + b * x2 + c from two scalar feature columns."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(2, 1)

    def forward(self, x1, x2):
        return self.linear(torch.cat([x1, x2], dim=1))
