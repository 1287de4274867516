"""op=Adasum (issue 24, item 15) on real workers: every rank gets the Adasum tree of all ranks'
tensors, checked against a NumPy reference of Horovod's pairwise formula (tests/support); grouped
calls, scale factors, odd lengths and sizes that are not a power of two."""

from __future__ import annotations

import numpy as np
import pytest

from adasum_util import tree
from engine_util import run_job

pytestmark = pytest.mark.timeout(120)




def _inputs(rank, length, salt=0):
    rng = np.random.default_rng(1000 * salt + rank)
    return rng.standard_normal(length)


def adasum_worker(lengths) -> dict:
    import fuse
    fuse.init()
    r, n = fuse.rank(), fuse.size()
    out = {}
    for length in lengths:
        for dtype in ("float64", "float32", "float16"):
            x = _inputs(r, length).astype(dtype).reshape(-1)
            got = fuse.allreduce(x, op=fuse.Adasum)
            out[f"{length} {dtype}"] = (got.dtype.name, got.astype(np.float64).tolist())
    shaped = _inputs(r, 12, salt=1).reshape(3, 4)
    out["2-d"] = fuse.allreduce(shaped, op=fuse.Adasum, name="adasum_2d").tolist()
    out["scaled"] = fuse.allreduce(_inputs(r, 9, salt=2), op=fuse.Adasum,
                                   prescale_factor=0.5, postscale_factor=3.0).tolist()
    group = fuse.grouped_allreduce([_inputs(r, 5, salt=3), _inputs(r, 7, salt=4)],
                                   op=fuse.Adasum)
    out["grouped"] = [g.tolist() for g in group]
    inplace = _inputs(r, 6, salt=5)
    fuse.allreduce_(inplace, op=fuse.Adasum)
    out["in place"] = inplace.tolist()
    out["orthogonal"] = fuse.allreduce(np.eye(n)[r], op=fuse.Adasum).tolist()
    out["identical"] = fuse.allreduce(np.arange(4.0), op=fuse.Adasum).tolist()
    try:
        fuse.allreduce(np.arange(4), op=fuse.Adasum)
        out["int"] = None
    except ValueError as err:
        out["int"] = str(err)
    out["after"] = fuse.allreduce(np.ones(2), op=fuse.Sum).tolist()
    return out


@pytest.mark.parametrize("n", [2, 4])
def test_adasum_matches_the_pairwise_reference(n):
    lengths = [1, 2, 5, 64, 1001]
    results = run_job(adasum_worker, n, args=(lengths,))
    tol = {"float64": 1e-12, "float32": 1e-5, "float16": 2e-2}
    for r, got in enumerate(results):
        for length in lengths:
            for dtype, rtol in tol.items():
                ins = [_inputs(k, length).astype(dtype) for k in range(n)]
                name, values = got[f"{length} {dtype}"]
                assert name == dtype
                np.testing.assert_allclose(values, tree(ins), rtol=rtol, atol=rtol,
                                           err_msg=f"rank {r} length {length} {dtype}")
        np.testing.assert_allclose(got["2-d"], tree([_inputs(k, 12, 1) for k in range(n)])
                                   .reshape(3, 4), rtol=1e-12)
        np.testing.assert_allclose(got["scaled"], 3.0 * tree(
            [0.5 * _inputs(k, 9, 2) for k in range(n)]), rtol=1e-12)
        np.testing.assert_allclose(got["grouped"][0], tree([_inputs(k, 5, 3) for k in range(n)]),
                                   rtol=1e-12)
        np.testing.assert_allclose(got["grouped"][1], tree([_inputs(k, 7, 4) for k in range(n)]),
                                   rtol=1e-12)
        np.testing.assert_allclose(got["in place"], tree([_inputs(k, 6, 5) for k in range(n)]),
                                   rtol=1e-12)
        assert got["orthogonal"] == [1.0] * n          # orthogonal vectors add up
        assert got["identical"] == [0.0, 1.0, 2.0, 3.0]  # parallel ones average
        assert "floating-point" in got["int"]
        assert got["after"] == [float(n)] * 2
        assert got == results[0]                          # the same on every rank


def odd_set_worker():
    import fuse
    fuse.init()
    try:
        fuse.allreduce(np.ones(3), op=fuse.Adasum)
        return None
    except ValueError as err:
        return str(err)


def test_adasum_refuses_a_set_that_is_not_a_power_of_two():
    for message in run_job(odd_set_worker, 3):
        assert "power-of-two" in message and "3" in message
