"""What Horovod's MXNet scripts and tests expect of fuse.mxnet (issue 24), on 2 real workers."""

import pytest

from mx_util import run_job

pytestmark = pytest.mark.timeout(240)


def test_alltoall_and_reducescatter_errors_have_horovods_types():
    import workers_mx_compat as w
    for out in run_job(w.errors):
        horovod_type = {"MXNetError": True, "RuntimeError": True, "ValueError": True}
        for case in ("uneven_rows", "splits_count", "splits_sum", "splits_negative"):
            assert out[case] == horovod_type, (case, out[case])
        for case in ("scalar_reducescatter", "scalar_grouped_reducescatter"):
            assert out[case] is not None and out[case]["ValueError"], (case, out[case])
        assert out["after"] == [[2.0]]


def test_horovod_submodules():
    import workers_mx_compat as w
    for checks in run_job(w.submodules):
        assert all(checks.values()), checks
