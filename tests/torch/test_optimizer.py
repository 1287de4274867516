"""DistributedOptimizer, broadcast helpers and SyncBatchNorm on 2 real workers."""

import pytest

torch = pytest.importorskip("torch", reason="tests/torch needs torch (pip install fuse[torch])")

from torch_util import run_job  # noqa: E402

pytestmark = pytest.mark.timeout(240)


def test_numerical_equivalence_with_one_process():
    import workers_optimizer as w
    for res in run_job(w.equivalence):
        assert res["sgd"] < 2e-5, res
        assert res["adam"] < 2e-5, res
        assert res["bpps2"] < 2e-5, res


def test_optimizer_options_and_errors():
    import workers_optimizer as w
    assert run_job(w.options) == [{"ok": True}, {"ok": True}]


def test_broadcast_optimizer_state_every_optimizer():
    import workers_optimizer as w
    done = run_job(w.optimizer_state)
    assert done[0] == done[1]
    assert {"SGD", "Adam", "AdamW", "Adagrad", "RMSprop", "LBFGS", "SparseAdam"} <= set(done[0])


def test_sync_batch_norm():
    import workers_optimizer as w
    assert run_job(w.sync_batch_norm) == [True, True]
