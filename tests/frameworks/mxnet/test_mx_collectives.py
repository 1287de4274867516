"""The collectives of fuse.mxnet on 2 real workers (real MXNet, real Gloo): every dtype, the
whole API, zero copy and MXNet's asynchronous engine, mismatch errors."""

import pytest

from mx_util import run_job

pytestmark = pytest.mark.timeout(240)


def test_every_dtype_every_collective():
    import workers_mx_collectives as w
    covered = run_job(w.dtype_matrix)
    assert covered[0] == covered[1] == ["uint8", "int8", "int32", "int64", "float16",
                                        "float32", "float64", "bool"]


def test_api_surface():
    import workers_mx_collectives as w
    assert run_job(w.api_surface) == [True, True]


def test_zero_copy_and_async_engine():
    import workers_mx_collectives as w
    for report in run_job(w.engine_and_memory):
        assert report == {k: True for k in report} and len(report) == 8, report


def test_mismatch_errors_name_tensor_ranks_and_values():
    import workers_mx_collectives as w
    res = run_job(w.errors)
    assert res[0]["shape"] == res[1]["shape"], "both ranks get the same error text"
    for rank_res in res:
        shape = rank_res["shape"]
        assert "bad.shape" in shape and "shape" in shape.lower(), shape
        assert "[2]" in shape and "[3]" in shape, shape          # both shapes
        assert "0" in shape and "1" in shape, shape
        dtype = rank_res["dtype"]
        assert "bad.dtype" in dtype and "float32" in dtype and "float64" in dtype, dtype
        assert "bad.op" in rank_res["op"] and "op" in rank_res["op"].lower(), rank_res["op"]
        assert "bad.root" in rank_res["root"] and "root" in rank_res["root"].lower()
        assert rank_res["after"] == [2.0, 2.0], "the job goes on after a mismatch"
        assert rank_res["not_ndarray"].startswith("TypeError") and "NDArray" in \
            rank_res["not_ndarray"]
        assert rank_res["sparse"].startswith("ValueError") and "row_sparse" in \
            rank_res["sparse"]
        assert rank_res["splits"].startswith("CollectiveArgumentError") and "splits" in rank_res["splits"]
        assert rank_res["predivide"].startswith("ValueError"), rank_res["predivide"]
