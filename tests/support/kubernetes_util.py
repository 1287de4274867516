"""The container scenarios, shared by the test (tests/kubernetes/test_containers.py) and the
bench (bench/studies/k8s_recovery.py): the chart rendered with the test image and a shared hostPath
volume, its pods run as podman containers (pods.py), training the image's example
(docker/examples/torch_elastic.py), whose commits and results land in the shared volume."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from kubernetes_chart_util import render
from kubernetes_pods_util import Cluster

EXAMPLES = Path(__file__).resolve().parents[2] / "docker" / "examples"


def image() -> tuple[str, str]:
    name = os.environ.get("FUSE_K8S_IMAGE", "")
    if not name:
        raise RuntimeError("FUSE_K8S_IMAGE is not set: run scripts/test_kubernetes.sh, which "
                           "builds the image (scripts/build_image.sh) and sets it")
    repo, _, tag = name.rpartition(":")
    return repo, tag


def values(shared: Path, mode: str, steps: int, **extra) -> dict:
    repo, tag = image()
    vals = {"mode": mode, "image": {"repository": repo, "tag": tag, "pullPolicy": "Never"},
            "command": ["python", "/opt/fuse/examples/torch_elastic.py"],
            "env": [{"name": "STEPS", "value": str(steps)},
                    {"name": "STEP_SLEEP", "value": "0.1"},
                    {"name": "OUT_DIR", "value": "/shared"}],
            "workers": {"replicas": 2, "connectTimeout": 120},
            "volumes": [{"name": "shared", "hostPath": {"path": str(shared)}}],
            "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]}
    vals.update(extra)
    return vals


def reference(steps: int) -> list:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import torch_elastic
        return torch_elastic.reference(steps)
    finally:
        sys.path.remove(str(EXAMPLES))


def commits(shared: Path) -> list[tuple[float, int, int]]:
    path = shared / "commits.txt"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:
            out.append((float(parts[0]), int(parts[1]), int(parts[2])))
    return out


def results(shared: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(shared.glob("result.*.json"))]


def wait(cluster: Cluster, driver: str, predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got:
            return got
        code = cluster.exit_code(driver)
        if code is not None:
            got = predicate()       # it may have come true as the driver ended
            if got:
                return got
        if code is not None or time.monotonic() > deadline:
            raise AssertionError(
                f"{'the driver exited with ' + str(code) if code is not None else 'timed out'} "
                f"waiting for {what}; driver's log:\n{cluster.logs(driver)[-3000:]}\n"
                + "\n".join(f"--- {c}:\n{cluster.logs(c)[-1500:]}"
                            for c in cluster.containers if c != driver))
        time.sleep(0.1)


def elastic_run(shared: Path, workdir: Path, steps: int = 300, env: dict | None = None,
                driver_args: list[str] | None = None) -> dict:
    """Agent mode: 2 worker pods train; one is killed (SIGKILL, as a lost node does); the job
    re-forms on the other; a third pod starts and the job grows.  Returns the timings and the
    outcome (the caller checks it).  ``env``: more variables for every pod (FUSE_LOG_LEVEL);
    ``driver_args``: more fuserun flags for the driver (--verbose)."""
    vals = values(shared, "agent", steps,
                  elastic={"enabled": True, "minReplicas": 1, "maxReplicas": 3, "timeout": 120})
    vals["env"] += [{"name": k, "value": v} for k, v in (env or {}).items()]
    if driver_args:
        vals["driver"] = {"extraArgs": list(driver_args)}
    objects = render(vals)
    cluster = Cluster(objects, workdir)
    try:
        driver = cluster.start("Job")
        workers = [cluster.start("StatefulSet", i) for i in range(2)]
        wait(cluster, driver, lambda: any(s >= 20 and n == 2 for _t, s, n in commits(shared)),
             240, "20 steps on 2 worker pods")
        killed_at = time.time()
        cluster.kill(workers[0])
        after_kill = wait(cluster, driver, lambda: [c for c in commits(shared)
                                                    if c[0] > killed_at and c[2] == 1],
                          120, "a commit of the survivor alone")
        joined_at = time.time()
        added = cluster.start("StatefulSet", 2)
        after_join = wait(cluster, driver, lambda: [c for c in commits(shared)
                                                    if c[0] > joined_at and c[2] == 2],
                          120, "a commit with the added pod")
        # when the added agent joined the driver (its zygote warm): the join's two parts
        agent_joined = cluster.when_logged(added, "joined the driver")
        wait(cluster, driver, lambda: cluster.exit_code(driver) is not None or None, 300,
             "the driver's end")
        return {"driver_exit": cluster.exit_code(driver), "driver_log": cluster.logs(driver),
                "stamped_logs": {"driver": cluster.stamped_logs(driver),
                                 "survivor": cluster.stamped_logs(workers[1]),
                                 "added": cluster.stamped_logs(added)},
                "added_at": joined_at,
                "recovery_s": after_kill[0][0] - killed_at,
                "join_s": after_join[0][0] - joined_at,
                "agent_ready_s": None if agent_joined is None else agent_joined - joined_at,
                "results": results(shared), "reference": reference(steps), "steps": steps}
    finally:
        cluster.close()


def ssh_run(shared: Path, workdir: Path, steps: int = 30) -> dict:
    """ssh mode (Horovod's chart's layout): sshd in the worker pods, fuserun over ssh."""
    cluster = Cluster(render(values(shared, "ssh", steps)), workdir)
    try:
        for i in range(2):
            cluster.start("StatefulSet", i)
        driver = cluster.start("Job")
        wait(cluster, driver, lambda: cluster.exit_code(driver) is not None or None, 300,
             "the driver's end")
        return {"driver_exit": cluster.exit_code(driver), "driver_log": cluster.logs(driver),
                "results": results(shared), "reference": reference(steps), "steps": steps}
    finally:
        cluster.close()
