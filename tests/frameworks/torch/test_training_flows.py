"""Training patterns beyond a plain step, on 2 real workers: AMP loss scaling with clipping,
and uneven data with join."""

import needs
import pytest

torch = needs.module("torch")

from torch_util import run_job  # noqa: E402

pytestmark = pytest.mark.timeout(240)


def test_amp_grad_scaler_with_clipping_matches_one_process():
    import workers_torch_training_flows as w
    results = run_job(w.amp_grad_scaler)
    for res in results:
        assert res["diff"] < 2e-5, res
        assert res["scale"] == 2.0 ** 10, res            # no overflow in the 20 clean steps
        # rank 1's inf reached rank 0 through the allreduce: both skipped and backed off
        assert res["skipped"], res
        assert res["scale_after_overflow"] == 2.0 ** 9, res


def test_join_with_distributed_optimizer_and_uneven_steps():
    import workers_torch_training_flows as w
    r0, r1 = run_job(w.join_uneven_steps)
    assert r0["last_joined"] == r1["last_joined"] == 1
    assert r0["diff_from_reference"] < 2e-5 and r1["diff_from_reference"] < 2e-5, (r0, r1)
    assert r1["diff_after_broadcast"] < 2e-5
    for a, b in zip(r0["weights"], r1["weights"]):
        assert torch.equal(a, b)
