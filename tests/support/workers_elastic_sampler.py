"""Worker of tests/frameworks/torch/test_elastic_sampler.py: an ElasticSampler in a TorchState
whose ranks come out of a failure at different commits."""

from __future__ import annotations

SAMPLES = 16
BATCH = 2       # samples per rank per batch


def sampler_after_uneven_rollback(record: str) -> dict:
    """Every rank commits batch 0; batch 1 is committed on every rank but rank 0, whose commit
    failed half-way (a collective copy, such as a sharded optimizer's, can complete on one
    rank and fail on another when a worker leaves); every rank then rolls back to its last
    commit and syncs, as the elastic loop does.  ``record``: "batch" (``record_batch``, every
    rank's share) or "indices" (``record_indices``, each rank its own)."""
    import fuse.torch as hvd
    from fuse.torch.elastic import ElasticSampler, TorchState
    hvd.init()
    sampler = ElasticSampler(list(range(SAMPLES)), shuffle=True, seed=1)
    state = TorchState(sampler=sampler, batch=0)
    seen = {}
    for batch in (0, 1):
        seen[batch] = sorted(hvd.allgather_object(sampler.get_indices(batch, BATCH)), key=min)
        if record == "batch":
            sampler.record_batch(batch, BATCH)
        else:
            sampler.record_indices(sampler.get_indices(batch, BATCH))
        state.batch = batch + 1
        if batch == 0 or hvd.rank() != 0:
            state.save()
    state.restore()
    state.sync()
    left = hvd.allgather_object(list(sampler))
    hvd.shutdown()
    return {"batch": state.batch, "processed": sorted(sampler.processed_indices),
            "left": sorted(i for part in left for i in part),
            "batch0": sorted(i for part in seen[0] for i in part),
            "batch1": sorted(i for part in seen[1] for i in part)}
