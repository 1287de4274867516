"""Compression.powersgd in DistributedOptimizer, on 2 real workers over Gloo."""

import needs
import pytest

torch = needs.module("torch")

from torch_util import run_job  # noqa: E402

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def results():
    """Every check's results on each of the 2 workers, from one job."""
    import workers_torch_powersgd as w
    return run_job(w.all_checks)


def test_steps_match_a_numpy_recomputation(results):
    for res in (r["numpy"] for r in results):
        # the three weights at rank 2 (16x72, 64x32, 10x64), not the biases or the 4x3 weight
        assert res["compressed"] == {"conv.weight": [2, 72], "fc1.weight": [2, 32],
                                     "fc2.weight": [2, 64]}, res
        assert res["iteration"] == 5, res
        assert res["worst"]["plain"] < 1e-5, res
        assert res["worst"]["uncompressed_in_compressed_step"] < 1e-5, res
        assert res["worst"]["compressed"] < 1e-3, res
        assert res["away_from_plain"] > 1e-2, res      # it did compress


def test_error_feedback_keeps_the_long_run_sum(results):
    for res in (r["error_feedback"] for r in results):
        # with error feedback, what was applied is the true sum less the ranks' mean error
        assert res["with_identity"] < 1e-4, res
        # rank 2 of a full-rank matrix loses much of it each step: fed back, the loss stays
        # bounded while the sum grows; dropped, it grows with the sum
        assert res["with"] < 0.1 * res["without"], res
        assert res["without"] > 0.2, res


def test_small_model_reaches_the_plain_accuracy(results):
    for res in (r["accuracy"] for r in results):
        assert res["plain_weights_equal_across_ranks"], res
        assert res["powersgd_weights_equal_across_ranks"], res
        assert res["plain"] > 0.8, res                  # the task is learnt at all
        assert res["powersgd"] >= res["plain"] - 0.01, res


def test_misuse_gets_clear_errors(results):
    res = results[0]["misuse"]
    assert "StatefulCompressionError" in res["allreduce"], res
    assert "DistributedOptimizer(compression=...)" in res["allreduce"], res
    assert "(4, 4)" in res["allreduce"], res
    assert "not the class" in res["class"], res
    assert "op=Average or op=Sum" in res["op"], res
    assert "rank must be >= 1" in res["rank"], res
    assert "one per optimizer" in res["shared"], res
