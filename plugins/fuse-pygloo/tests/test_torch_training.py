"""A Horovod-style PyTorch training (examples/pytorch_mnist_style.py: DistributedOptimizer,
broadcast_parameters, metric allreduces) under fuserun on FUSE_BACKEND=pygloo, 2 and 3
workers: it finishes, the replicas end identical, and the model learned."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import needs
import pytest

from engine_util import job_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("np_", [2, 3])
def test_distributed_optimizer_trains_on_pygloo(np_):
    needs.module("torch")
    script = os.path.join(ROOT, "examples", "pytorch_mnist_style.py")
    # debug logging: each rank's "initialized ... backend pygloo" line proves which backend ran
    env = job_env({"FUSE_BACKEND": "pygloo", "FUSE_LOG_LEVEL": "debug", "OMP_NUM_THREADS": 1})
    proc = subprocess.run([sys.executable, "-m", "fuse.runner.launch", "-np", str(np_),
                           sys.executable, script, "--epochs", "2"], capture_output=True,
                          text=True, timeout=280, env=env, cwd=ROOT)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    backends = re.findall(r"initialized: rank (\d+) of \d+, backend (\S+)", out)
    assert sorted(backends) == [(str(r), "pygloo") for r in range(np_)], backends
    finals = re.findall(r"\[(\d)\]<stdout>:rank (\d) final accuracy ([\d.]+) checksum (\S+)",
                        proc.stdout)
    assert sorted(f[0] for f in finals) == [str(r) for r in range(np_)], proc.stdout[-2000:]
    assert len({f[3] for f in finals}) == 1, f"replicas diverged: {finals}"
    accuracy = {float(f[2]) for f in finals}
    assert len(accuracy) == 1 and accuracy.pop() > 0.5, finals   # it learned something
