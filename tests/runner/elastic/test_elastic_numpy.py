"""Elastic jobs on the NumPy API under ``fuserun``: real worker processes on hosts that all
resolve to this machine.  Workers die (SIGKILL, rank 0 included, before or inside a
collective) or raise in the middle of training; a discovery script grows the job from 2 to 4
workers and shrinks it back; every worker fails; the reset limit and --min-np stop the job.
Each training check compares every final worker's weights, bit for bit, with a reference that
applies every batch exactly once (elastic_util)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from elastic_util import (HERE, Gate, check_training, fuserun, grow_and_shrink, job_env, progress,
                          set_hosts, wait_for, write_discovery)

pytestmark = pytest.mark.timeout(180)

WORKER = str(HERE / "workers_elastic_numpy.py")
FOUR_HOSTS = "localhost:1,127.0.0.1:1,127.0.0.2:1,127.0.0.3:1"


def run(tmp_path, *flags, batches=30, faults=(), timeout=150, env=None):
    argv = fuserun(*flags, sys.executable, WORKER, str(tmp_path), str(batches), *faults)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env=job_env(env), cwd=str(tmp_path))


# (rank 0 killed outside a collective: in test_elastic_torch)
@pytest.mark.parametrize("fault", ["kill:0:1:8", "killin:0:0:8", "raise:0:3:8", "raise:0:0:8"])
def test_a_lost_worker_is_survived(tmp_path, fault):
    proc = run(tmp_path, "-np", "4", "--min-np", "2", "-H", FOUR_HOSTS, faults=[fault])
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = check_training(tmp_path, 30, expect_workers=3)
    assert all(r["size"] == 3 and r["generation"] == 1 for r in res)
    kind = fault.split(":")[0]
    text = "was killed by signal SIGKILL" if kind != "raise" else "exited with code 1"
    assert text in proc.stderr and "is blacklisted" in proc.stderr, proc.stderr[-3000:]
    if kind == "raise":
        assert "injected failure at batch 8" in proc.stderr


def test_two_failures_in_a_row(tmp_path):
    proc = run(tmp_path, "-np", "4", "--min-np", "2", "-H", FOUR_HOSTS,
               faults=["kill:0:3:5", "raise:1:0:12"])
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = check_training(tmp_path, 30, expect_workers=2)
    assert {r["generation"] for r in res} == {2}


def test_a_worker_lost_while_the_job_reforms(tmp_path):
    proc = run(tmp_path, "-np", "4", "--min-np", "2", "-H", FOUR_HOSTS,
               faults=["kill:0:3:5", "killreset:1:1:0"])
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = check_training(tmp_path, 30, expect_workers=2)
    assert {r["generation"] for r in res} == {2}


def test_discovery_grows_and_shrinks_the_job(tmp_path):
    batches = 40
    grow_and_shrink(tmp_path, [sys.executable, WORKER, str(tmp_path), str(batches)], steps=5,
                    unit="batches", step_sleep="0.03", final_hosts=["localhost:1", "127.0.0.2:1"],
                    timeouts=(60, 60, 120))
    res = check_training(tmp_path, batches, expect_workers=2)
    assert {r["generation"] for r in res} == {2}


def test_the_running_workers_train_on_while_an_added_one_starts_up(tmp_path):
    """The driver starts an added worker ahead of its generation and publishes the generation
    once the worker is warm: while the added worker's start-up is held (HOLD_ADDED), the 2
    running workers go on committing; released, it joins and the job ends on 3."""
    batches = 300
    script, hosts_file = write_discovery(tmp_path, ["localhost:1", "127.0.0.1:1"])
    gate = Gate(tmp_path, batches)      # open until the added worker is released
    argv = fuserun("-np", "2", "--min-np", "2", "--max-np", "3", "--host-discovery-script",
                   str(script), sys.executable, WORKER, str(tmp_path), str(batches))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=job_env({"STEP_SLEEP": "0.03", "HOLD_ADDED": "1"}),
                            cwd=str(tmp_path))
    try:
        wait_for(lambda: len(progress(tmp_path)) >= 5, 60, proc, "5 batches on 2 workers")
        set_hosts(hosts_file, ["localhost:1", "127.0.0.1:1", "127.0.0.2:1"])
        wait_for(lambda: list(tmp_path.glob("held.*")), 60, proc, "the added worker's start")
        held_at = len(progress(tmp_path))
        wait_for(lambda: len(progress(tmp_path)) >= held_at + 20, 60, proc,
                 "20 commits of the running workers while the added one is held")
        assert {g for g, _s, _n in progress(tmp_path)} == {0}
        gate.limit(len(progress(tmp_path)) + 1)     # the rest waits for the 3
        (tmp_path / "release").touch()
        gate.held(proc, 60, "the job to grow to 3 workers", size=3)
        gate.open()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-4000:]
    res = check_training(tmp_path, batches, expect_workers=3)
    assert {r["generation"] for r in res} == {1}


def test_every_worker_failing_ends_the_job(tmp_path):
    proc = run(tmp_path, "-np", "4", "--min-np", "1", "-H", FOUR_HOSTS,
               faults=["raise:0:all:4"])
    assert proc.returncode != 0
    assert "the elastic job failed: every worker failed" in proc.stderr, proc.stderr[-3000:]
    assert "failures (4):" in proc.stderr
    for host in ("localhost", "127.0.0.1", "127.0.0.2", "127.0.0.3"):
        assert f"worker {host}:0 (generation 0) exited with code 1" in proc.stderr


def test_the_reset_limit_ends_the_job(tmp_path):
    proc = run(tmp_path, "-np", "4", "--min-np", "1", "--reset-limit", "1", "-H", FOUR_HOSTS,
               faults=["kill:0:3:4", "kill:1:2:8"])
    assert proc.returncode != 0
    assert "the job re-formed 1 times, the --reset-limit" in proc.stderr, proc.stderr[-3000:]
    assert "worker 127.0.0.2:0 (generation 1) was killed by signal SIGKILL" in proc.stderr


def test_too_few_workers_for_min_np_ends_the_job(tmp_path):
    proc = run(tmp_path, "-np", "2", "--min-np", "2", "--elastic-timeout", "2",
               "-H", "localhost:1,127.0.0.1:1", faults=["kill:0:1:4"])
    assert proc.returncode != 0
    assert "fewer than --min-np 2, for 2 s (--elastic-timeout)" in proc.stderr, \
        proc.stderr[-3000:]
    assert "worker 127.0.0.1:0 (generation 0) was killed by signal SIGKILL" in proc.stderr


def test_a_blacklisted_host_comes_back_after_its_cooldown(tmp_path):
    proc = run(tmp_path, "-np", "4", "--min-np", "2", "--blacklist-cooldown-range", "1", "2",
               "-H", FOUR_HOSTS, batches=150, faults=["kill:0:3:5"])
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "host 127.0.0.3 is blacklisted for" in proc.stderr, proc.stderr[-3000:]
    assert "generation 2: 4 workers" in proc.stderr and "cool-down ended" in proc.stderr
    res = check_training(tmp_path, 150, expect_workers=4)
    assert {r["generation"] for r in res} == {2}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_generation_without_a_silent_worker_fails_the_survivors_collectives(tmp_path):
    # rank 2 stops (SIGSTOP) before its allreduce of batch 20: alive, its connections open, so
    # nothing in the engine notices with the default settings and the others wait for it.
    # Discovery then drops its host: the driver forms generation 1 without it, and the
    # survivors' pending allreduce fails at once (fuse.worker.generation_watch), so they
    # re-form and finish.  Before, they waited for good.
    script, hosts_file = write_discovery(tmp_path, ["localhost:1", "127.0.0.1:1",
                                                    "127.0.0.2:1"])
    argv = fuserun("-np", "3", "--min-np", "2", "--host-discovery-script", str(script),
                   sys.executable, WORKER, str(tmp_path), "60", "stop:0:2:20")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=job_env(), cwd=str(tmp_path))
    try:
        wait_for(lambda: any(n >= 20 for _g, _s, n in progress(tmp_path)), 60, proc,
                 "20 batches on 3 workers")
        stopped = int((tmp_path / "stopped.pid").read_text())
        set_hosts(hosts_file, ["localhost:1", "127.0.0.1:1"])
        wait_for(lambda: any(g == 1 for g, _s, _n in progress(tmp_path)), 60, proc,
                 "a commit of generation 1")
        # the survivors went on while the stopped worker still lived (the driver stops a
        # worker left out only after 10 s): they did not wait for its connections to close
        assert _alive(stopped)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-4000:]
    res = check_training(tmp_path, 60, expect_workers=2)
    assert {r["generation"] for r in res} == {1}
