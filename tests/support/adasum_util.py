"""A NumPy reference of Horovod's Adasum, for the tests of every framework: the adaptive sum of
two vectors, and the tree in which the ranks' vectors are combined."""

from __future__ import annotations

import numpy as np


def pair(a, b) -> np.ndarray:
    """Horovod's adaptive sum of two vectors (coefficient 1 for a vector of ~zero norm)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    dot = a @ b
    ca = 1 - dot / (2 * (a @ a)) if a @ a >= 1e-8 else 1.0
    cb = 1 - dot / (2 * (b @ b)) if b @ b >= 1e-8 else 1.0
    return ca * a + cb * b


def tree(vectors) -> np.ndarray:
    """Ranks combined pairwise at distance 1, then 2, 4, ...: (x0+x1)+(x2+x3) in Adasum."""
    level = [np.asarray(v, np.float64).reshape(-1) for v in vectors]
    while len(level) > 1:
        level = [pair(a, b) for a, b in zip(level[::2], level[1::2])]
    return level[0]
