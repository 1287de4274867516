"""Elastic Keras 3 under ``fuserun``: KerasState and the elastic callbacks survive a SIGKILLed
worker mid-epoch, and follow a discovery script from 2 workers to 4 and back to 2.  Every final
worker must hold the weights that applying each committed step once gives (tests/runner/elastic)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import needs

needs.module("tensorflow")

from elastic_util import (DIM, HERE, batch_rows, fuserun, grow_and_shrink, job_env)  # noqa: E402

pytestmark = pytest.mark.timeout(300)

WORKER = str(HERE / "workers_elastic_keras.py")


def _reference(steps):
    """Keras 3's SGD with momentum, in float32 as the model runs it:
    m = momentum * m - lr * g; w = w + m."""
    w = np.zeros(DIM, np.float32)
    m = np.zeros(DIM, np.float32)
    half, lr = np.float32(0.5), np.float32(0.125)
    for s in range(steps):
        g = batch_rows(s).sum(axis=0).astype(np.float32)
        m = m * half - g * lr
        w = w + m
    return w


def _check(out_dir, workers, epochs, steps_per_epoch):
    res = [json.loads(p.read_text()) for p in sorted(out_dir.glob("result.*.json"))]
    assert len(res) == workers, res
    steps = {r["step"] for r in res}
    assert len(steps) == 1, res
    step = steps.pop()
    # a re-form mid-epoch runs that epoch's steps again in full (Keras 3 keeps
    # steps_per_epoch), each on new batches: nothing committed is lost or applied twice
    assert step >= epochs * steps_per_epoch
    want = _reference(step)
    for r in res:
        assert r["epoch"] == epochs
        assert np.array_equal(np.array(r["w"], dtype=np.float32), want), \
            (r["rank"], r["w"], want.tolist())
    return res


def test_keras_state_survives_a_killed_worker(tmp_path):
    argv = fuserun("-np", "3", "--min-np", "2", "-H", "localhost:1,127.0.0.1:1,127.0.0.2:1",
                   sys.executable, WORKER, str(tmp_path), "2", "8", "kill:0:1:5")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=280, env=job_env(),
                          cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = _check(tmp_path, 2, 2, 8)
    assert {r["generation"] for r in res} == {1}


def test_keras_discovery_grows_and_shrinks_the_job(tmp_path):
    grow_and_shrink(tmp_path, [sys.executable, WORKER, str(tmp_path), "6", "10"], steps=3,
                    unit="steps", step_sleep="0.05", final_hosts=["127.0.0.1:1", "127.0.0.3:1"],
                    timeouts=(120, 150, 200))
    _check(tmp_path, 2, 6, 10)
