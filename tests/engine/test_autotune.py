"""Autotune (FUSE_AUTOTUNE) on real 2-rank jobs: the tuner on rank 0 samples, writes its log,
fixes the best setting, leaves explicit knobs alone, and results stay right throughout."""

from __future__ import annotations

import csv

import needs
import numpy as np
import pytest

from engine_util import Checker, run_job


pytestmark = pytest.mark.timeout(120)

MAX_SAMPLES = 6
SMALL = {"FUSE_AUTOTUNE": "1", "FUSE_AUTOTUNE_WARMUP_SAMPLES": "1",
         "FUSE_AUTOTUNE_STEPS_PER_SAMPLE": "3",
         "FUSE_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": str(MAX_SAMPLES)}
# a synthetic step: tensors from 256 B to 512 KiB, as a model's gradients would be
SIZES = [64 * (1 + i % 7) * (2 ** (i % 12)) for i in range(24)]
COMPARE_STEPS = 6


def _workload(compare_rounds=0):
    """Steps of SIZES-shaped allreduces until the tuner is done; then, with ``compare_rounds``,
    the same steps timed on rank 0 in alternating blocks with the setting the engine started
    with (the defaults) and the tuned one."""
    import fuse
    from fuse.worker import state as job_state

    fuse.init()
    rank, size = fuse.rank(), fuse.size()
    engine = job_state.engine()
    initial = engine.tuning.values() if rank == 0 else None
    check = Checker(rank)
    inputs = [np.full(n, float(rank + 1 + i), np.float32) for i, n in enumerate(SIZES)]
    expected = [np.full(n, float(sum(r + 1 + i for r in range(size))), np.float32)
                for i, n in enumerate(SIZES)]
    steps = 0

    def step():
        nonlocal steps
        handles = [fuse.allreduce_async(x, name=f"g.{i}", op=fuse.Sum)
                   for i, x in enumerate(inputs)]
        for i, h in enumerate(handles):
            check.array(fuse.synchronize(h), expected[i], f"step {steps} g.{i}")
        steps += 1

    while True:
        step()
        state = fuse.autotune_state()
        done = np.array([1 if state is not None and state["done"] else 0], np.int32)
        if fuse.allreduce(done, name="done", op=fuse.Sum)[0] or steps > 20000:
            break
    state = fuse.autotune_state()
    if rank == 0:
        applied = engine.tuning.values()
        check.equal((applied[0], round(applied[1], 6), applied[2]),
                    (state["fusion_threshold"], round(state["cycle_time_ms"], 6),
                     state["cache_enabled"]), "values the engine uses")
    final = fuse.broadcast_object(state, root_rank=0)
    # switching between the defaults and the tuned values keeps every result right (whether
    # the tuned values are faster is bench/studies/autotune.py's question, not a test's)
    for _ in range(compare_rounds):
        for label in ("default", "tuned"):
            if rank == 0:
                engine.tuning.set(*(initial if label == "default" else applied))
            for _ in range(COMPARE_STEPS):
                step()
    fuse.shutdown()
    check.finish()
    return {"rank": rank, "steps": steps, "checks": check.count, "final": final,
            "own": state, "initial": initial}


def _needs_optimiser():
    """Skip (or fail, where required) without optuna and scipy: called by each test rather than
    at import, because tests/backends/mpi imports this module's tests to run them on MPI."""
    needs.module("optuna", "autotune")
    needs.module("scipy", "autotune")


def _rows(path):
    with open(path) as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["cycle_time_ms", "fusion_threshold", "cache_enabled", "score"]
    return [(float(c), int(t), int(e), float(s)) for c, t, e, s in rows[1:]]


def test_autotune_converges_and_ranks_agree(tmp_path):
    _needs_optimiser()
    log = tmp_path / "autotune.csv"
    out = run_job(_workload, 2, env=dict(SMALL, FUSE_AUTOTUNE_LOG=str(log)), args=(4,))
    assert min(r["checks"] for r in out) > len(SIZES) * MAX_SAMPLES
    final = out[0]["final"]
    assert final["done"] and final["samples"] == MAX_SAMPLES
    assert out[1]["final"] == final            # both ranks report rank 0's values
    assert out[1]["own"] is None and out[0]["own"] == final
    assert out[0]["steps"] == out[1]["steps"] > MAX_SAMPLES
    rows = _rows(log)
    assert len(rows) == MAX_SAMPLES
    # the first sample scores the setting the job started with, the others the search space
    assert rows[0][:3] == (1.0, 128 * 1024 * 1024, 1) and rows[0][3] > 0
    for cycle, threshold, cache, score in rows[1:]:
        assert 0 <= cycle <= 20 and 0 <= threshold <= 64 * 1024 * 1024
        assert cache in (0, 1) and score > 0
    best = max(rows, key=lambda r: r[3])
    assert (final["cycle_time_ms"], final["fusion_threshold"], int(final["cache_enabled"])) == (
        pytest.approx(best[0], abs=1e-4), best[1], best[2])
    assert final["best_score"] == pytest.approx(best[3], rel=1e-5)
    assert final["fixed"] == []
    # the search moved: not every sample used the same setting
    assert len({(r[0], r[1], r[2]) for r in rows}) > 1
    assert out[0]["initial"] == (128 * 1024 * 1024, 1.0, True)


def test_autotune_keeps_explicit_knobs(tmp_path):
    _needs_optimiser()
    log = tmp_path / "autotune.csv"
    env = dict(SMALL, FUSE_AUTOTUNE_LOG=str(log), FUSE_FUSION_THRESHOLD="1048576",
               HOROVOD_CACHE_CAPACITY="0")
    out = run_job(_workload, 2, env=env)
    assert min(r["checks"] for r in out) > len(SIZES) * MAX_SAMPLES
    final = out[0]["final"]
    assert final["done"] and final["fixed"] == ["cache_enabled", "fusion_threshold"]
    assert final["fusion_threshold"] == 1048576 and final["cache_enabled"] is False
    rows = _rows(log)
    assert len(rows) == MAX_SAMPLES
    assert {(r[1], r[2]) for r in rows} == {(1048576, 0)}
    assert len({r[0] for r in rows}) > 1      # the cycle time is still searched
