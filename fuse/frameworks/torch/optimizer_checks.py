"""What the optimizer wrappers (:mod:`.optimizer`'s, :mod:`.sharded_optimizer`'s and
:mod:`.adasum_optimizer`'s) check and read of the optimizer they wrap, written once for all."""

from __future__ import annotations

import torch

from fuse.collectives.grad_sync import check_names


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


ZERO_GRAD_ERROR = ("optimizer.zero_grad() was called after loss.backward() but before "
                   "optimizer.step() or optimizer.synchronize(). This is prohibited as it can "
                   "cause a race condition.")


def wrapped_attribute(name: str, wrapped) -> property:
    """An attribute of the wrapped optimizer (``wrapped(wrapper)``), read and assigned through
    the wrapper: ``__getattr__`` forwards reads only, and an assignment would otherwise land on
    the wrapper (``__setattr__`` hands properties their value)."""
    return property(lambda self: getattr(wrapped(self), name),
                    lambda self, value: setattr(wrapped(self), name, value))


def parameter_names(params, named_parameters) -> list:
    """Each of ``params``' name in ``named_parameters`` (None for all when not given);
    ValueError when a parameter has none."""
    if named_parameters is None:
        return [None] * len(params)
    named = list(named_parameters)
    check_names(named)
    by_id = {id(p): name for name, p in named}
    missing = [id(p) for p in params if id(p) not in by_id]
    if missing:
        raise ValueError("named_parameters was specified, but one or more model "
                         "parameters were not named. Python object ids: "
                         f"{', '.join(str(m) for m in missing)}")
    return [by_id[id(p)] for p in params]
