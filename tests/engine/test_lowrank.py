"""PowerSGD's row kernels (fuse.engine.lowrank) against NumPy, on shapes that exercise every
loop's remainder (rank not a multiple of 4, rows not a multiple of the vector width) and on
views into a larger buffer, as the fused P and Q messages hand them over."""

from __future__ import annotations

import numpy as np
import pytest

from fuse.engine import lowrank

SHAPES = [(1, 1, 1), (7, 13, 3), (16, 72, 4), (33, 130, 5), (64, 9, 2)]


def _arrays(n, m, r, seed=0):
    rng = np.random.default_rng(seed)
    buf = rng.standard_normal(3 + n * r + r * m).astype(np.float32)
    p = buf[3:3 + n * r].reshape(n, r)              # views at an offset, like the messages'
    qt = buf[3 + n * r:].reshape(r, m)
    return rng.standard_normal((n, m)).astype(np.float32), p, qt, rng


def _close(got, want):
    scale = max(float(np.abs(want).max()), 1.0)
    assert float(np.abs(got - want).max()) <= 1e-5 * scale


@pytest.mark.parametrize("n,m,r", SHAPES)
def test_kernels_match_numpy(n, m, r):
    M, p, qt, rng = _arrays(n, m, r)
    want_p = M.astype(np.float64) @ qt.T
    lowrank.project(M, qt, p)
    _close(p, want_p)

    want_qt = (M.astype(np.float64).T @ p).T
    lowrank.back_project(M, p, qt)
    _close(qt, want_qt)

    out = np.full((n, m), np.nan, np.float32)      # every value is written
    lowrank.expand(p, qt, out)
    _close(out, p.astype(np.float64) @ qt)

    # feed back: T += G - pa @ qta, then p = T @ qt.T; with no approximation, T += G
    ra = max(1, r - 1)
    T, G = M.copy(), rng.standard_normal((n, m)).astype(np.float32)
    pa = rng.standard_normal((n, ra)).astype(np.float32)
    qta = rng.standard_normal((ra, m)).astype(np.float32)
    want_t = M.astype(np.float64) + G - pa.astype(np.float64) @ qta
    lowrank.feed_back_project(T, G, pa, qta, qt, p)
    _close(T, want_t)
    _close(p, want_t @ qt.T)
    T = M.copy()
    lowrank.feed_back_project(T, G, None, None, qt, p)
    _close(T, M.astype(np.float64) + G)


def test_shapes_that_do_not_fit_are_refused():
    M, p, qt, _ = _arrays(8, 12, 3)
    with pytest.raises(ValueError, match=r"qt has shape \(3, 11\), expected \(3, 12\)"):
        lowrank.project(M, qt[:, :11].copy(), p)
    with pytest.raises(ValueError, match="C-contiguous|contiguous"):
        lowrank.expand(p, qt, M.T)
