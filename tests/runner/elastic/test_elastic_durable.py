"""Durable commits (fuse.worker.durable): an elastic job with FUSE_ELASTIC_CHECKPOINT_DIR whose
launcher is SIGKILLed (its guards then end every worker) and which is started again with the
same command resumes from its last durable commit: it commits no batch at or below the last
one the first run committed, and its final weights equal the reference that applies every
batch exactly once (elastic_util).  Real worker processes under fuserun."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import needs
import numpy as np
import pytest

from elastic_util import HERE, check_training, fuserun, job_env, progress, wait_for
from fuse.worker import durable, elastic

pytestmark = pytest.mark.timeout(180)

WORKER = str(HERE / "workers_elastic_numpy.py")


def _workers_of(out_dir) -> list[int]:
    """Pids of processes running the worker script for ``out_dir``."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if WORKER.encode() in argv and str(out_dir).encode() in argv:
            pids.append(int(pid))
    return pids


def test_a_job_killed_whole_resumes_from_its_last_durable_commit(tmp_path):
    batches = 150
    argv = fuserun("-np", "2", "--min-np", "1", "-H", "localhost:1,127.0.0.1:1",
                   sys.executable, WORKER, str(tmp_path), str(batches))
    env = job_env({"STEP_SLEEP": "0.02",
                   durable.DIR_ENV: str(tmp_path / "checkpoint")})
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env, cwd=str(tmp_path))
    try:
        wait_for(lambda: any(n >= 30 for _g, _s, n in progress(tmp_path)), 120, first,
                 "30 batches")
    finally:
        first.kill()        # SIGKILL: the launcher cannot clean up; its guards end the workers
        first.communicate()
    deadline = time.monotonic() + 30
    while _workers_of(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _workers_of(tmp_path) == [], "workers of the killed job still run"
    killed_at = max(n for _g, _s, n in progress(tmp_path))
    os.replace(tmp_path / "progress.txt", tmp_path / "progress.first.txt")

    again = subprocess.run(argv, capture_output=True, text=True, timeout=150, env=env,
                           cwd=str(tmp_path))
    assert again.returncode == 0, again.stderr[-4000:]
    resumed_at = progress(tmp_path)[0][2]
    # every commit of the first run was durable before rank 0 logged it: the second run
    # starts after the last logged one, not from batch 0
    assert resumed_at >= killed_at + 1, (killed_at, resumed_at)
    check_training(tmp_path, batches, expect_workers=2)


class _Counter(elastic.ObjectState):
    def __init__(self, **kwargs):
        super().__init__(bcast_object=lambda x: x, get_rank=lambda: 0, **kwargs)


def test_a_durable_commit_is_written_whole_and_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv(durable.DIR_ENV, str(tmp_path))
    state = _Counter(batch=3, w=np.arange(4.0))
    state.save()
    durable.write(state.saved())
    assert sorted(os.listdir(tmp_path)) == [durable.FILE_NAME]     # no temporary file left
    other = _Counter(batch=0, w=np.zeros(4))
    other.load_saved(durable.read())
    assert other.batch == 3 and np.array_equal(other.w, np.arange(4.0))


def test_durable_without_a_directory_says_which_variable(monkeypatch):
    monkeypatch.delenv(durable.DIR_ENV, raising=False)
    assert durable.wanted(None) is False
    with pytest.raises(ValueError, match=durable.DIR_ENV):
        durable.wanted(True)


def test_a_torch_state_is_written_and_read_back(tmp_path, monkeypatch):
    torch = needs.module("torch")
    from fuse.torch.elastic import TorchState
    monkeypatch.setenv(durable.DIR_ENV, str(tmp_path))
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(4, 3)).sum().backward()
    opt.step()
    state = TorchState(model, opt, epoch=5)
    durable.write(state.saved())

    other_model = torch.nn.Linear(3, 2)
    other_opt = torch.optim.SGD(other_model.parameters(), lr=0.1, momentum=0.9)
    other = TorchState(other_model, other_opt, epoch=0)
    other.load_saved(durable.read())
    assert other.epoch == 5
    for a, b in zip(model.parameters(), other_model.parameters()):
        assert torch.equal(a, b)
    assert other_opt.state_dict()["state"][0]["momentum_buffer"].equal(
        opt.state_dict()["state"][0]["momentum_buffer"])
