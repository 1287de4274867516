"""The chart's rendered pods run for real, as podman containers of fuse's image (kubernetes_util.py,
pods.py): an elastic torch job in agent mode that loses a worker pod (SIGKILL) and gains one,
and the same job in ssh mode.  Every final worker must hold the weights of every step applied
exactly once (the example's arithmetic is exact)."""

from __future__ import annotations

import pytest

from kubernetes_util import elastic_run, ssh_run
from kubernetes_pods_util import remove, shared_dir

pytestmark = pytest.mark.timeout(600)


def check(outcome: dict, size: int) -> None:
    assert outcome["driver_exit"] == 0, outcome["driver_log"][-4000:]
    res = outcome["results"]
    assert sorted(r["rank"] for r in res) == list(range(size)), res
    for r in res:
        assert r["size"] == size and r["steps"] == outcome["steps"], r
        assert r["w"] == outcome["reference"], (r["w"], outcome["reference"])


def test_agent_mode_loses_a_pod_and_grows(tmp_path):
    shared = shared_dir(tmp_path)
    try:
        outcome = elastic_run(shared, tmp_path)
    finally:
        remove(shared)
    check(outcome, size=2)
    log = outcome["driver_log"]
    assert "was killed by signal SIGKILL" in log and "is blacklisted" in log, log[-3000:]
    print(f"kill -> next commit {outcome['recovery_s']:.2f} s; "
          f"added pod -> commit {outcome['join_s']:.2f} s")


def test_ssh_mode_trains(tmp_path):
    shared = shared_dir(tmp_path)
    try:
        outcome = ssh_run(shared, tmp_path)
    finally:
        remove(shared)
    check(outcome, size=2)
