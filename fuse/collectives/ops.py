"""Reduction ops and Horovod's ``average=`` compatibility rule."""

from __future__ import annotations

import warnings

from fuse import _core

Average = _core.AVERAGE
Sum = _core.SUM
Adasum = _core.ADASUM
Min = _core.MIN
Max = _core.MAX
Product = _core.PRODUCT

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
    return _core.OP_NAMES[op]
