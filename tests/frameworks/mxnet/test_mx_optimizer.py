"""DistributedTrainer, DistributedOptimizer and broadcast_parameters on 2 real workers (real
MXNet Gluon, real Gloo)."""

import pytest

from mx_util import run_job

pytestmark = pytest.mark.timeout(240)


def test_two_workers_match_one_process_with_twice_the_batch():
    """2 workers x batch B == 1 process x batch 2B after 20 steps, for DistributedTrainer and
    DistributedOptimizer, with SGD+momentum and Adam, num_groups and predivide."""
    import workers_mx_optimizer as w
    results = run_job(w.equivalence)
    assert results[0].keys() == results[1].keys()
    assert len(results[0]) == 5
    for rank_res in results:
        for name, res in rank_res.items():
            assert res["replicas_equal"], (name, res)
            assert res["moved"] > 1e-2, (name, res)        # training changed the weights
            assert res["max_diff"] < 1e-5, (name, res)


def test_fp16_compression():
    import workers_mx_optimizer as w
    for res in run_job(w.compression_fp16):
        assert res["replicas_equal"] and res["grads_equal"], res
        assert res["grad_dtypes"] == ["float32"], res
        assert res["max_diff"] < 5e-3, res


def test_broadcast_parameters_and_wrapper_plumbing():
    import workers_mx_optimizer as w
    for report in run_job(w.parameters_and_options):
        assert report == {k: True for k in report} and len(report) == 9, report


def test_trainer_mismatch_names_the_parameter():
    import workers_mx_optimizer as w
    res = run_job(w.trainer_mismatch)
    assert res[0][0] == res[1][0], res
    text, ok = res[0]
    assert text.startswith("MismatchError"), text
    # gradients are named by their index in the (sorted) parameter list, as in Horovod, so
    # that the names agree even when Gluon's automatic parameter names differ between ranks;
    # index 1 is dense0_weight (sorted after dense0_bias), submitted first: gradients go in
    # the reverse of the parameters' order, the order backward writes them
    assert "'allreduce.mismatch.1'" in text and "[3, 2]" in text and "[4, 2]" in text, text
    assert "rank 0" in text and "rank 1" in text, text
    assert ok == [2.0] and res[1][1] == [2.0]
