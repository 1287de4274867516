"""Elastic jobs with a worker that is alive but silent: stopped (SIGSTOP) while it trains, or
while the job re-forms, before it says it is ready for the next generation.  Its connections
stay open and acknowledged (the kernel answers for a stopped process), so neither its peers'
connections nor the rendezvous notice; its heartbeat (fuse.worker.heartbeat) stops, and after
the peer timeout the driver leaves it out and blacklists its host, as for a lost worker.  The
job goes on without it, and a worker that wakes up later is refused (it is not part of the new
generation) instead of training with it.  The peer timeout is 4 s here (15 s by default)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from elastic_util import HERE, Gate, check_training, fuserun, job_env, progress, wait_for

pytestmark = pytest.mark.timeout(120)

WORKER = str(HERE / "workers_elastic_numpy.py")
PEER_TIMEOUT = {"FUSE_PEER_TIMEOUT_SECONDS": "4"}


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie counts: it no longer runs)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def test_a_stopped_worker_is_left_out_and_refused_when_it_wakes(tmp_path):
    # rank 2 stops before its allreduce of batch 10; the others wait for it in that allreduce.
    # The job holds at batch 40 (the gate) until the test has woken the stopped worker and
    # seen it leave by itself.
    gate = Gate(tmp_path, 40)
    err_path = tmp_path / "launcher.err"
    argv = fuserun("-np", "3", "--min-np", "2", "-H", "localhost:1,127.0.0.1:1,127.0.0.2:1",
                   sys.executable, WORKER, str(tmp_path), "60", "stop:0:2:10")
    with open(err_path, "w") as err_file:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err_file, text=True,
                                env=job_env(PEER_TIMEOUT), cwd=str(tmp_path))
    try:
        wait_for(lambda: "generation 1:" in err_path.read_text(), 60, proc,
                 "a generation without the stopped worker")
        stopped = int((tmp_path / "stopped.pid").read_text())
        assert not _gone(stopped)
        os.kill(stopped, signal.SIGCONT)
        # it finds itself out of the job and exits by itself (the driver would stop it only
        # 10 s after the re-form)
        wait_for(lambda: _gone(stopped), 60, proc, "the woken worker's exit")
        gate.open()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = err_path.read_text()
    assert proc.returncode == 0, err[-4000:]
    assert "worker 127.0.0.2:0 stopped answering: no heartbeat for" in err, err[-3000:]
    assert "host 127.0.0.2 is blacklisted" in err
    assert "worker 127.0.0.2:0 is not part of generation 1" in err, err[-3000:]
    res = check_training(tmp_path, 60, expect_workers=2)
    assert {r["generation"] for r in res} == {1}
    assert {s for g, s, _n in progress(tmp_path) if g == 1} == {2}


def test_a_worker_silent_at_the_rendezvous_is_left_out(tmp_path):
    # rank 3 dies at batch 5; as the job re-forms, the worker that had rank 1 stops before it
    # says it is ready for generation 1: the others wait for it at the rendezvous until the
    # driver gives up on it and forms generation 2 without it
    argv = fuserun("-np", "4", "--min-np", "2",
                   "-H", "localhost:1,127.0.0.1:1,127.0.0.2:1,127.0.0.3:1",
                   sys.executable, WORKER, str(tmp_path), "30", "kill:0:3:5", "stopjoin:0:1:0")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=100,
                          env=job_env(PEER_TIMEOUT), cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "worker 127.0.0.1:0 stopped answering: no heartbeat for" in proc.stderr, \
        proc.stderr[-3000:]
    res = check_training(tmp_path, 30, expect_workers=2)
    assert {r["generation"] for r in res} == {2}
    stopped = int((tmp_path / "stopped.pid").read_text())
    assert _gone(stopped), "the stopped worker outlived the job"
