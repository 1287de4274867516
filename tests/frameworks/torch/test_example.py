"""The Horovod-style example script runs to completion under fuserun with 2 workers."""

import os
import re
import subprocess

import needs
import pytest

needs.module("torch")

from torch_util import PYTHON, ROOT, job_env  # noqa: E402

pytestmark = pytest.mark.timeout(240)


@pytest.mark.parametrize("extra", [[], ["--use-adasum"]], ids=["average", "adasum"])
def test_horovod_style_script_under_fuserun(extra):
    script = os.path.join(ROOT, "examples", "pytorch_mnist_style.py")
    with open(script) as f:
        assert "import fuse.torch as hvd" in f.read()
    proc = subprocess.run([PYTHON, "-m", "fuse.runner.launch", "-np", "2", PYTHON, script,
                           "--epochs", "2", *extra], capture_output=True, text=True,
                          timeout=200, env=job_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    finals = re.findall(r"\[(\d)\]<stdout>:rank (\d) final accuracy ([\d.]+) checksum (\S+)",
                        proc.stdout)
    assert sorted(f[0] for f in finals) == ["0", "1"], proc.stdout[-2000:]
    accuracy = {float(f[2]) for f in finals}
    checksums = {f[3] for f in finals}
    assert len(checksums) == 1, f"replicas diverged: {finals}"
    assert len(accuracy) == 1 and accuracy.pop() > 0.5, finals   # it learned something


def test_horovod_style_embeddings_script_under_fuserun():
    """Sparse embeddings with SparseAdam, an unnamed DistributedOptimizer, gradients after
    broadcast_optimizer_state, differentiable grouped_allgather, reducescatter and Horovod's
    submodules, in a script written for Horovod."""
    script = os.path.join(ROOT, "examples", "pytorch_embeddings_style.py")
    with open(script) as f:
        text = f.read()
    assert "import fuse.torch as hvd" in text
    assert not [line for line in text.splitlines() if line.startswith(("import horovod",
                                                                       "from horovod"))]
    proc = subprocess.run([PYTHON, "-m", "fuse.runner.launch", "-np", "2", PYTHON, script,
                           "--epochs", "3"], capture_output=True, text=True, timeout=200,
                          env=job_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "allreduce.noname.0.0" in proc.stdout
    finals = re.findall(r"\[(\d)\]<stdout>:rank (\d) final recall ([\d.]+) popular (\d+) "
                        r"checksum (\S+)", proc.stdout)
    assert sorted(f[0] for f in finals) == ["0", "1"], proc.stdout[-2000:]
    assert len({f[4] for f in finals}) == 1, f"replicas diverged: {finals}"
    assert len({f[3] for f in finals}) == 1, finals
    assert all(float(f[2]) > 0.5 for f in finals), finals      # it learned (chance: 1/64)
