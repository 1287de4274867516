"""Elastic PyTorch jobs under ``fuserun``: TorchState (model, DistributedOptimizer with
momentum, ElasticSampler) survives a SIGKILLed worker (rank 0 included) and an exception in the
middle of an epoch, and a discovery script that grows the job from 2 to 4 workers and back.
Every worker of the last generation must end with the weights rebuilt from the log of
committed steps, bit for bit; every epoch must have seen every sample, repeating only the few
that pad the last round after a re-partition, and never one a committed step had processed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from elastic_util import HERE, check_sampled_training, fuserun, grow_and_shrink, job_env
import needs

needs.module("torch")

pytestmark = pytest.mark.timeout(240)

WORKER = str(HERE / "workers_elastic_torch.py")
EPOCHS = 2
FOUR_HOSTS = "localhost:1,127.0.0.1:1,127.0.0.2:1,127.0.0.3:1"


def check(out_dir, expect_workers, epochs=EPOCHS):
    return check_sampled_training(out_dir, expect_workers, epochs)


@pytest.mark.parametrize("fault", ["kill:0:1:7", "kill:0:0:7", "raise:0:2:7",
                                   "raisefirst:0:2:7"])
def test_torch_state_survives_a_lost_worker(tmp_path, fault):
    argv = fuserun("-np", "3", "--min-np", "2", "-H", "localhost:1,127.0.0.1:1,127.0.0.2:1",
                   sys.executable, WORKER, str(tmp_path), str(EPOCHS), fault)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=200, env=job_env(),
                          cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = check(tmp_path, 2)
    assert {r["generation"] for r in res} == {1}


def test_torch_discovery_grows_and_shrinks_the_job(tmp_path):
    grow_and_shrink(tmp_path, [sys.executable, WORKER, str(tmp_path), "8"], steps=3,
                    unit="steps", step_sleep="0.05", final_hosts=["127.0.0.1:1", "127.0.0.3:1"],
                    timeouts=(60, 60, 150))
    check(tmp_path, 2, epochs=8)


def test_powersgd_state_survives_a_lost_worker(tmp_path):
    """Rank 2 fails after step 7 (PowerSGD compresses from step 2, commits every 3 steps): the
    two survivors, a step past their last commit when they notice, restart from the PowerSGD
    state they committed (iteration, Q's, their own errors) and end with the same Q's."""
    import json
    argv = fuserun("-np", "3", "--min-np", "2", "-H", "localhost:1,127.0.0.1:1,127.0.0.2:1",
                   sys.executable, str(HERE / "workers_elastic_powersgd.py"), str(tmp_path), "2", "7")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=200, env=job_env(),
                          cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = [json.loads(p.read_text()) for p in tmp_path.glob("result.*.json")]
    assert len(results) == 2, results
    for res in results:
        assert res["size"] == 2 and res["qs_equal"], res
        assert res["iteration"] == 16, res
        records = res["records"]
        starts = [r for r in records if r["event"] == "start"]
        assert [s["generation"] for s in starts] == [0, 1], starts
        before = [r for r in records if r["generation"] == 0 and r["event"] != "start"]
        last_commit = [r for r in before if r["event"] == "commit"][-1]
        last_step = [r for r in before if r["event"] == "step"][-1]
        assert (last_commit["step"], last_step["step"]) == (6, 8), before
        restored = starts[1]
        assert restored["step"] == 6, restored
        assert restored["digest"] == last_commit["digest"], (restored, last_commit)
        assert restored["digest"] != last_step["digest"], (restored, last_step)
        assert restored["digest"]["iteration"] == 6
        assert restored["digest"]["q"] and restored["digest"]["error"], restored


def test_sharded_optimizer_state_survives_a_lost_worker(tmp_path):
    """DistributedOptimizer(sharded=True): rank 0 is killed, and its shard of the momentum
    comes back from the last commit, re-sharded over the 2 survivors."""
    argv = fuserun("-np", "3", "--min-np", "2", "-H", "localhost:1,127.0.0.1:1,127.0.0.2:1",
                   sys.executable, WORKER, str(tmp_path), str(EPOCHS), "kill:0:0:7")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=200,
                          env=job_env({"SHARDED": "1"}), cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = check(tmp_path, 2)
    assert {r["generation"] for r in res} == {1}


def test_sharded_optimizer_grows_and_shrinks_with_the_job(tmp_path):
    """2 -> 4 -> 2 workers with a sharded optimizer: each change re-shards the state.  The
    shrink fails the collectives in flight on every worker, often the gathering of the
    sharded state inside a commit: the commit is then kept whole or not at all."""
    grow_and_shrink(tmp_path, [sys.executable, WORKER, str(tmp_path), "8"], steps=3,
                    unit="steps", step_sleep="0.05", final_hosts=["127.0.0.1:1", "127.0.0.3:1"],
                    timeouts=(60, 60, 150), env={"SHARDED": "1"})
    check(tmp_path, 2, epochs=8)
