"""Adasum: the adaptive summation of Horovod's ``op=Adasum``, written once for every framework.

Two gradients ``a`` and ``b`` combine as

    adasum(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b

(a coefficient stays 1 when its vector's squared norm is below 1e-8): orthogonal gradients
add up, parallel ones average.  Over 2^k ranks the combination follows Horovod's CPU
algorithm, recursive vector halving with distance doubling: at level d = 1, 2, 4, ... each
rank trades half of the segment it holds with rank ``r ^ d`` (the lower rank keeps the first
half), the ranks of each block of 2d sum their partial dot products and squared norms, and each
rank combines its half with the block's coefficients.  The final segments are allgathered.  So
the result is the tree adasum(adasum(x0, x1), adasum(x2, x3)), ..., the same on every rank.

The steps run on the process set's own collectives (one alltoall and one small allreduce per
level, then an allgather), each named after the Adasum call, so nothing new is needed from the
engine or a backend.  Each tensor is combined on its own (a grouped call combines tensor by
tensor), in float64, and cast back to its dtype.
"""

from __future__ import annotations

import numpy as np

from fuse.job.process_sets import global_process_set

# Horovod's guard: a vector this small (squared norm) keeps coefficient 1
NORM_FLOOR = 1e-8

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


def pairwise(a: np.ndarray, b: np.ndarray, dot: float, a_sq: float, b_sq: float):
    """``adasum(a, b)`` given the full vectors' ``a.b``, ``|a|^2`` and ``|b|^2`` (``a`` and
    ``b`` may be matching segments of them)."""
    ca = 1.0 - dot / (2.0 * a_sq) if a_sq >= NORM_FLOOR else 1.0
    cb = 1.0 - dot / (2.0 * b_sq) if b_sq >= NORM_FLOOR else 1.0
    return ca * a + cb * b


def reference(vectors: list) -> np.ndarray:
    """The Adasum of ``vectors`` (one per rank, 2^k of them) computed in one place: the tree
    the distributed algorithm follows.  For tests and checks."""
    level = [np.asarray(v, np.float64).reshape(-1) for v in vectors]
    while len(level) > 1:
        level = [pairwise(a, b, float(a @ b), float(a @ a), float(b @ b))
                 for a, b in zip(level[::2], level[1::2])]
    return level[0]


def check_set_size(size: int) -> None:
    if size & (size - 1):
        raise ValueError(f"Adasum needs a power-of-two number of ranks (as Horovod's CPU "
                         f"Adasum does); this process set has {size}")


def _segments(length: int, size: int) -> list:
    """``(lo, hi)`` of the segment each set rank holds after the halving steps."""
    out = []
    for me in range(size):
        lo, hi, level = 0, length, 1
        while level < size:
            mid = lo + (hi - lo) // 2
            lo, hi = (lo, mid) if not me & level else (mid, hi)
            level *= 2
        out.append((lo, hi))
    return out


def allreduce(vector: np.ndarray, name: str, exchange, process_set=global_process_set
              ) -> np.ndarray:
    """The Adasum of every member's 1-D float64 ``vector`` (same length on every member).

    ``exchange`` runs the three collectives the steps need on NumPy arrays, blocking:
    ``alltoall(array, splits, name)``, ``allreduce_sum(array, name)`` and
    ``allgather(array, name)``, each over ``process_set`` (the collectives module passes its
    own; taking them as an argument keeps this module free of it)."""
    size = len(process_set.ranks)
    check_set_size(size)
    if size == 1 or vector.size == 0:
        return vector.copy()
    me = process_set.rank()
    lo, hi = 0, vector.size
    seg = vector.copy()
    level = 1
    while level < size:
        partner = me ^ level
        mid = lo + (hi - lo) // 2
        keep_first = not me & level
        cut = mid - lo
        keep, send = (seg[:cut], seg[cut:]) if keep_first else (seg[cut:], seg[:cut])
        splits = [0] * size
        splits[partner] = send.size
        theirs = exchange.alltoall(np.ascontiguousarray(send), splits,
                                   f"{name}.adasum.{level}.exchange")
        # the lower-ranked side is "a" on both partners, so both compute the same sums
        a, b = (keep, theirs) if keep_first else (theirs, keep)
        blocks = size // (2 * level)
        sums = np.zeros(3 * blocks)
        block = me // (2 * level)
        sums[3 * block:3 * block + 3] = (a @ b, a @ a, b @ b)
        sums = exchange.allreduce_sum(sums, f"{name}.adasum.{level}.dots")
        dot, a_sq, b_sq = sums[3 * block:3 * block + 3]
        seg = pairwise(a, b, dot, a_sq, b_sq)
        lo, hi = (lo, mid) if keep_first else (mid, hi)
        level *= 2
    gathered = exchange.allgather(np.ascontiguousarray(seg), f"{name}.adasum.gather")
    out = np.empty_like(vector)
    offset = 0
    for seg_lo, seg_hi in _segments(vector.size, size):
        out[seg_lo:seg_hi] = gathered[offset:offset + seg_hi - seg_lo]
        offset += seg_hi - seg_lo
    return out
