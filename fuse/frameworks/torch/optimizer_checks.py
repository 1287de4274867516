"""What both optimizer wrappers (:mod:`.optimizer`'s and :mod:`.adasum_optimizer`'s) check and
read of the optimizer they wrap, written once for both."""

from __future__ import annotations

import torch


def check_optimizer(optimizer) -> None:
    """The wrappers take a ``torch.optim.Optimizer`` and nothing else."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError("DistributedOptimizer wraps a torch.optim.Optimizer, got "
                        f"{type(optimizer).__name__}")


def unique_params(optimizer) -> list:
    """The optimizer's parameters in param-group order, each once (a parameter may sit in
    several groups)."""
    params, seen = [], set()
    for group in optimizer.param_groups:
        for p in group["params"]:
            if id(p) not in seen:
                seen.add(id(p))
                params.append(p)
    return params
