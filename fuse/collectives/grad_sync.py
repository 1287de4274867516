"""Bookkeeping of a distributed optimizer, written once for every framework.

Pure Python and framework-free: which gradients form a group, what each tensor is called on
the wire, how many backward passes each parameter has seen, and how an op and a predivide
factor become (op, prescale, postscale).  The torch, TensorFlow and MXNet optimizers drive it
from their own gradient hooks.
"""

from __future__ import annotations

from typing import Hashable, Sequence

from fuse.collectives.ops import Average, resolve_op


def split_groups(n: int, groups: int) -> list[list[int]]:
    """Indices ``0..n-1`` cut into ``groups`` contiguous groups of near-equal size (the first
    groups take the remainder); never an empty group."""
    if groups <= 0:
        raise ValueError(f"groups must be a positive number, got {groups}")
    groups = min(groups, n)
    base, extra = divmod(n, groups) if groups else (0, 0)
    out, start = [], 0
    for g in range(groups):
        size = base + (1 if g < extra else 0)
        out.append(list(range(start, start + size)))
        start += size
    return out


def assign_groups(keys: Sequence[Hashable], groups=None, num_groups: int = 0,
                  ids=id) -> list[list[int]]:
    """Group the tensors ``keys`` (in order) for grouped allreduce.

    ``groups`` is None (every tensor on its own), an int (that many contiguous groups), or a
    list of lists of tensors (those groups; every other tensor on its own).  ``num_groups`` is
    the deprecated spelling of an int ``groups``.  Returns lists of indices into ``keys``;
    singletons are tensors reduced on their own."""
    if num_groups and groups is not None:
        raise ValueError("give groups or num_groups (deprecated), not both")
    if num_groups:
        groups = int(num_groups)
    n = len(keys)
    if groups is None or groups == 0:
        return [[i] for i in range(n)]
    if isinstance(groups, int):
        return split_groups(n, groups) if n else []
    if not isinstance(groups, (list, tuple)) or not all(isinstance(g, (list, tuple))
                                                        for g in groups):
        raise ValueError("groups must be an int or a list of lists of parameters")
    where = {ids(k): i for i, k in enumerate(keys)}
    taken: set[int] = set()
    out = []
    for g in groups:
        members = []
        for t in g:
            i = where.get(ids(t))
            if i is None:
                raise ValueError("groups contains a tensor that is not a parameter of the "
                                 "optimizer")
            if i in taken:
                raise ValueError("a parameter appears in more than one group")
            taken.add(i)
            members.append(i)
        if members:
            out.append(sorted(members))
    out.extend([i] for i in range(n) if i not in taken)
    return out


def wire_names(names: Sequence[str | None], prefix: str = "allreduce") -> list[str]:
    """The collective name of each gradient: ``allreduce.<name>``, or
    ``allreduce.noname.<index>`` for unnamed ones."""
    return [f"{prefix}.{n}" if n is not None else f"{prefix}.noname.{i}"
            for i, n in enumerate(names)]


def check_names(named: Sequence[tuple[str, object]]) -> None:
    """Horovod's checks on ``named_parameters``: (name, tensor) pairs with unique names."""
    if any(not isinstance(pair, tuple) or len(pair) != 2 for pair in named):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                         "usually produced by model.named_parameters().")
    seen, dups = set(), []
    for name, _ in named:
        if name in seen:
            dups.append(name)
        seen.add(name)
    if dups:
        raise ValueError("Parameter names in named_parameters must be unique. Found "
                         f"duplicates: {', '.join(sorted(set(dups)))}")


def scaling(op, predivide: float) -> tuple[int, float, float]:
    """(op, prescale, postscale) for averaging with a predivide factor: divide by ``f`` before
    the sum and multiply by ``f`` after (the engine adds 1/size for Average)."""
    op = resolve_op(op, None)
    if predivide != 1.0:
        if op != Average:
            raise ValueError("gradient_predivide_factor needs op == Average")
        if predivide <= 0:
            raise ValueError("gradient_predivide_factor must be positive")
        return op, 1.0 / predivide, float(predivide)
    return op, 1.0, 1.0


class PassCounter:
    """How many backward passes each parameter has accumulated since the last sync."""

    TOO_MANY = ("Gradients were computed more than backward_passes_per_step times before call "
                "to step(). Increase backward_passes_per_step to accumulate gradients locally.")

    def __init__(self, n: int, backward_passes_per_step: int = 1):
        self.counts = [0] * n
        self.set_passes(backward_passes_per_step)

    def set_passes(self, passes: int) -> None:
        if int(passes) < 1:
            raise ValueError(f"backward_passes_per_step must be >= 1, got {passes}")
        self.passes = int(passes)

    def record(self, i: int) -> bool:
        """One more pass for parameter ``i``; True when its gradient is complete.  Raises
        AssertionError past ``backward_passes_per_step`` (as Horovod)."""
        if self.counts[i] >= self.passes:
            raise AssertionError(self.TOO_MANY)
        self.counts[i] += 1
        return self.counts[i] == self.passes

    def any_pending(self) -> bool:
        return any(self.counts)

    def reset(self) -> None:
        self.counts = [0] * len(self.counts)
