"""ElasticSampler on its own (one process, fuse not started: one replica): what it records,
what survives a state_dict round trip, and what a new epoch starts with; then its sync on 2
real workers whose ranks come out of a failure at different commits.  The sampler across
re-formed jobs is tested with real workers in tests/runner/elastic/test_elastic_torch.py."""

from __future__ import annotations

import needs
import pytest

needs.module("torch")

from fuse.torch.elastic import ElasticSampler  # noqa: E402


def test_a_restored_sampler_skips_what_was_committed():
    sampler = ElasticSampler(list(range(10)), shuffle=True, seed=5)
    order = list(iter(sampler))
    assert sorted(order) == list(range(10)) and order != list(range(10))
    assert list(iter(ElasticSampler(list(range(10)), shuffle=True, seed=5))) == order
    sampler.record_batch(0, 3)
    sampler.record_batch(1, 3)
    assert sampler.processed_indices == set(order[:6])
    saved = sampler.state_dict()

    again = ElasticSampler(list(range(10)), shuffle=True, seed=5)
    again.load_state_dict(saved)
    rest = list(iter(again))
    assert sorted(rest) == sorted(order[6:]) and len(again) == 4
    assert again.get_indices(0, 3) == rest[:3]

    again.set_epoch(1)
    assert again.processed_indices == set() and len(again) == 10
    assert sorted(iter(again)) == list(range(10))
    assert list(iter(again)) != order          # the next epoch is shuffled anew


def test_without_shuffle_the_order_is_the_dataset_order():
    sampler = ElasticSampler(list(range(6)), shuffle=False)
    sampler.record_indices([0, 1])
    sampler.reset()
    assert list(iter(sampler)) == [2, 3, 4, 5]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("record", ["batch", "indices"])
def test_a_step_rank_0_rolled_back_is_not_skipped(record):
    """Rank 0's state is what every rank trains on after a sync (its model is broadcast):
    samples of a commit that rank 0 did not keep, though another rank did, are seen again."""
    from torch_util import run_job
    from workers_elastic_sampler import SAMPLES, sampler_after_uneven_rollback
    results = run_job(sampler_after_uneven_rollback, 2, args=(record,))
    first = results[0]
    assert first["batch"] == 1, first
    assert first["processed"] == first["batch0"], first
    assert set(first["batch1"]) <= set(first["left"]), first
    assert sorted(set(first["left"])) == sorted(set(range(SAMPLES)) - set(first["batch0"])), first
    for r, res in enumerate(results):
        assert res == first, (r, res, first)
