"""Worker side of test_adasum.py: fuse.torch with op=Adasum on every rank."""

from __future__ import annotations

import numpy as np
import torch

import fuse.torch as hvd


def adasum():
    """allreduce(op=Adasum) and DistributedOptimizer(op=Adasum); the test compares them with
    its NumPy reference."""
    hvd.init()
    r = hvd.rank()
    torch.manual_seed(100 + r)
    out = {"inputs": torch.randn(11).tolist()}
    out["allreduce"] = hvd.allreduce(torch.tensor(out["inputs"]), op=hvd.Adasum).tolist()
    x = torch.tensor(out["inputs"], dtype=torch.float32, requires_grad=True)
    hvd.allreduce(x, op=hvd.Adasum).sum().backward()
    out["grad_is_adasum_of_ones"] = x.grad.tolist()

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    start = [p.detach().clone() for p in model.parameters()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    data = torch.arange(6.0).reshape(2, 3) * (r + 1) - r
    loss = (model(data) ** 2).sum()
    opt.zero_grad()
    loss.backward()
    out["grads"] = [p.grad.reshape(-1).tolist() for p in model.parameters()]
    opt.step()
    out["start"] = [s.reshape(-1).tolist() for s in start]
    out["after"] = [p.detach().reshape(-1).tolist() for p in model.parameters()]
    out["isinstance"] = isinstance(opt, torch.optim.SGD)
    try:
        with opt.skip_synchronize():
            pass
        out["skip"] = None
    except AssertionError as err:
        out["skip"] = str(err)
    return out
