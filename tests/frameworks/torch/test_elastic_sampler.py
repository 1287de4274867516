"""ElasticSampler on its own (one process, fuse not started: one replica): what it records,
what survives a state_dict round trip, and what a new epoch starts with.  The sampler across
re-formed jobs is tested with real workers in tests/runner/elastic/test_elastic_torch.py."""

from __future__ import annotations

import needs

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
