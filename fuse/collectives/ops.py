"""Reduction ops and Horovod's ``average=`` compatibility rule."""

from __future__ import annotations

import warnings

from fuse.engine.protocol import ADASUM, AVERAGE, MAX, MIN, OP_NAMES, PRODUCT, SUM

# Horovod's names for the engine's op codes (hvd.Average, ...): the ones fuse's Python layers use
Average = AVERAGE
Sum = SUM
Adasum = ADASUM
Min = MIN
Max = MAX
Product = PRODUCT

_VALID = {Average, Sum, Adasum, Min, Max, Product}


def resolve_op(op=None, average=None, default=Average) -> int:
    """Horovod's rule: ``average`` is deprecated; both given is an error; neither means
    ``default`` (Average for allreduce)."""
    if op is not None and average is not None:
        raise ValueError("the op parameter supersedes average; give only one of them")
    if average is not None:
        warnings.warn("the average parameter is deprecated; use op=Average or op=Sum",
                      DeprecationWarning, stacklevel=3)
        op = Average if average else Sum
    if op is None:
        op = default
    if op not in _VALID:
        raise ValueError(f"unknown reduction op {op!r}; use Average, Sum, Adasum, Min, Max "
                         "or Product")
    return op


def op_name(op: int) -> str:
    return OP_NAMES[op]
