"""The PyTorch models the benchmarks train: ResNet-50-shaped and transformer-shaped parameter
sets, and a small CNN."""

from __future__ import annotations

import torch

from common import resnet50_shapes, transformer_shapes


class ShapedModel(torch.nn.Module):
    """A model's parameter tensors and almost no compute: by default ResNet-50's 161 (25.6 M
    float32 values); ``ShapedModel("transformer")``: a 6-layer GPT-style decoder's 76 (35.6 M,
    common.transformer_shapes).

    Its forward is ``s * sum_p p.sum() * w_p`` with ``s`` from the batch, so the backward pass
    writes a full gradient into every parameter (in reverse order) at little cost: a step is
    dominated by gradient synchronisation (and the optimizer's update).
    """

    SHAPES = {"resnet50": resnet50_shapes, "transformer": transformer_shapes}

    def __init__(self, shapes: str = "resnet50"):
        super().__init__()
        self.params = torch.nn.ParameterList(
            torch.nn.Parameter(torch.randn(s) * 0.01) for s in self.SHAPES[shapes]())
        self.register_buffer("w", torch.linspace(0.5, 1.5, len(self.params)))

    def forward(self, x):
        s = x.mean()
        total = x.new_zeros(())
        for k, p in enumerate(self.params):
            total = total + p.sum() * self.w[k]
        return total * s


class SmallCNN(torch.nn.Module):
    """Three conv layers and a linear head for 32x32 RGB images, 10 classes (~0.3 M params)."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(64, 128, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2))
        self.head = torch.nn.Linear(128 * 4 * 4, classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def synthetic_images(batch: int, seed: int, classes: int = 10):
    """A fixed random batch of 32x32 images and labels (the data never limits the step)."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 3, 32, 32, generator=g),
            torch.randint(0, classes, (batch,), generator=g))
