"""Agent mode (``fuserun --agents`` and ``fuserun --agent``) with plain local processes: a driver
whose workers are started by agents that join its store, as worker pods do on Kubernetes.  An
agent killed with SIGKILL (its worker dies with it, as in a deleted pod) is a lost host, a new
agent a new host; the training is checked bit for bit (elastic_util).  Then the ways an agent
ends: the driver refuses its secret, it never reaches the driver, the driver goes away."""

from __future__ import annotations

import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time

import pytest

from elastic_util import HERE, Gate, check_training, fuserun, job_env, progress

pytestmark = pytest.mark.timeout(180)

WORKER = str(HERE / "workers_elastic_numpy.py")


def start_driver(tmp_path, secret: str, *flags: str, batches: int = 200) -> tuple:
    """The driver, on loopback only; returns (process, its store's port)."""
    argv = fuserun("--agents", "--store-addr", "127.0.0.1", "--store-bind", "127.0.0.1",
                   *flags, sys.executable, WORKER, str(tmp_path), str(batches))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=job_env({"FUSE_SECRET_KEY": secret, "STEP_SLEEP": "0.05"}),
                            cwd=str(tmp_path))
    line = proc.stderr.readline()       # "fuserun: waiting up to ... to join at ADDR:PORT"
    found = re.search(r"join at 127\.0\.0\.1:(\d+)", line)
    assert found, f"no store address in the driver's first line: {line!r}"
    return proc, int(found.group(1))


def start_agent(port: int, secret: str, *flags: str) -> subprocess.Popen:
    return subprocess.Popen(
        fuserun("--agent", "--driver", f"127.0.0.1:{port}", *flags),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=job_env({"FUSE_SECRET_KEY": secret}), start_new_session=True)


def sizes(out_dir) -> list[int]:
    out = []
    for _g, s, _n in progress(out_dir):
        if not out or out[-1] != s:
            out.append(s)
    return out


def stop(*procs: subprocess.Popen) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL) if p.pid else None
            p.communicate()


def test_agents_train_lose_a_host_and_grow(tmp_path):
    secret = secrets.token_hex(32)
    batches = 30
    gate = Gate(tmp_path, 5)        # each phase held until the job has re-formed
    driver, port = start_driver(tmp_path, secret, "-np", "2", "--min-np", "1", "--max-np", "3",
                                batches=batches)
    agents = [start_agent(port, secret) for _ in range(2)]
    try:
        gate.held(driver, 60, "5 batches on 2 agents", size=2)
        os.killpg(agents[0].pid, signal.SIGKILL)        # the pod is gone, its worker with it
        gate.held(driver, 60, "the job re-formed on 1 agent", size=1)
        gate.held(driver, 60, "3 batches on 1 agent", size=1, committed=gate.allow(3))
        agents += [start_agent(port, secret) for _ in range(2)]
        gate.held(driver, 60, "the job grew to 3 agents", size=3)
        gate.open()
        out, err = driver.communicate(timeout=120)
    finally:
        stop(driver, *agents)
    assert driver.returncode == 0, err[-4000:]
    assert sizes(tmp_path)[:3] == [2, 1, 3], sizes(tmp_path)
    lost = agents[0].stderr.read()
    me = re.search(r"agent: (\S+) joined", lost).group(1)    # how the driver named that pod
    assert f"worker {me}:0 was killed by signal SIGKILL" in err, err[-3000:]
    assert f"host {me} is blacklisted" in err, err[-3000:]
    check_training(tmp_path, batches, expect_workers=3)
    for agent in agents[1:]:        # told the job is over: they leave without an error
        _out, agent_err = agent.communicate(timeout=30)
        assert agent.returncode == 0, agent_err[-2000:]
        assert "the job is over" in agent_err


def test_an_agent_without_the_job_secret_is_refused(tmp_path):
    secret = secrets.token_hex(32)
    driver, port = start_driver(tmp_path, secret, "-np", "1", "--elastic-timeout", "30")
    try:
        intruder = start_agent(port, secrets.token_hex(32))
        _out, err = intruder.communicate(timeout=60)
        assert intruder.returncode == 2, err
        assert "refused this agent" in err and "job secret is not this job's" in err, err
        agent = start_agent(port, secret)       # the job's own agent still runs the job
        out, derr = driver.communicate(timeout=60)
        assert driver.returncode == 0, derr[-3000:]
        assert "refused" in derr        # the store said it turned a request away
        agent.communicate(timeout=30)
    finally:
        stop(driver)


def test_an_agent_that_never_reaches_the_driver_gives_up(tmp_path):
    with socket.socket() as s:      # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    agent = start_agent(port, secrets.token_hex(32), "--connect-timeout", "1")
    _out, err = agent.communicate(timeout=60)
    assert agent.returncode == 1, err
    assert f"could not reach the driver at 127.0.0.1:{port} within 1 s" in err, err
    assert time.monotonic() - t0 < 50


def test_an_agent_whose_driver_goes_away_stops(tmp_path):
    secret = secrets.token_hex(32)
    driver, port = start_driver(tmp_path, secret, "-np", "2", "--elastic-timeout", "60")
    agent = start_agent(port, secret)
    try:
        deadline = time.monotonic() + 30
        while "joined the driver" not in (line := agent.stderr.readline()):
            assert line and time.monotonic() < deadline, "the agent did not join"
        driver.kill()
        driver.communicate()
        _out, err = agent.communicate(timeout=60)
    finally:
        stop(driver, agent)
    assert agent.returncode == 1, err
    assert f"lost the driver at 127.0.0.1:{port}" in err, err
