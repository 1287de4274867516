"""The collectives of fuse.torch on 2 real workers: every dtype, the whole API, errors,
autograd."""

import needs
import pytest

torch = needs.module("torch")

from torch_util import run_job  # noqa: E402

pytestmark = pytest.mark.timeout(240)


def test_every_dtype_every_collective():
    import workers_torch_collectives as w
    covered = run_job(w.dtype_matrix)
    expected = {"uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64",
                "bool", "bfloat16"}
    assert expected <= set(covered[0]), covered[0]
    assert covered[0] == covered[1]


def test_api_surface_and_errors():
    import workers_torch_collectives as w
    res = run_job(w.api_surface)
    for rank_res in res:
        assert set(rank_res) == {"shape", "dtype", "op", "root", "kind"}
        assert "shape" in rank_res["shape"].lower()
        assert "type" in rank_res["dtype"].lower() or "dtype" in rank_res["dtype"].lower()
        assert "op" in rank_res["op"].lower()
        assert "root" in rank_res["root"].lower()
    assert res[0] == res[1], "both ranks get the same error text"


def test_autograd_rules():
    import workers_torch_collectives as w
    assert run_job(w.autograd_rules) == [True, True]
