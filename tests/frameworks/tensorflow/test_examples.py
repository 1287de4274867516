"""The Horovod-style TensorFlow examples (issue 24) run unchanged but for the import, under
fuserun on 2 workers: a TensorFlow 1 graph script (unnamed allreduces, broadcast of the global
variables, a caught mismatch, Adasum) and a TensorFlow 2 model-parallel script (local layers,
PartialDistributedOptimizer, BestModelCheckpoint, Adasum)."""

import os
import re
import subprocess

import needs
import pytest

needs.module("tensorflow")

from tf_util import PYTHON, ROOT, job_env  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def _run(script, *args):
    path = os.path.join(ROOT, "examples", script)
    with open(path) as f:
        assert "import fuse.tensorflow as hvd" in f.read()
    proc = subprocess.run([PYTHON, "-m", "fuse.runner.launch", "-np", "2", PYTHON, path,
                           *args], capture_output=True, text=True, timeout=250, env=job_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_tensorflow_graph_script():
    out = _run("tensorflow_graph_style.py")
    finals = re.findall(r"\[(\d)\]<stdout>:rank \d first loss ([\d.]+) final loss ([\d.]+) "
                        r"weights (.+) mismatch (\w+) adasum \(3, 1\)", out)
    assert sorted(f[0] for f in finals) == ["0", "1"], out[-2000:]
    assert len({f[3] for f in finals}) == 1, f"replicas diverged: {finals}"
    for _, first, final, weights, mismatch in finals:
        assert float(final) < 0.05 * float(first), finals
        assert [round(float(w), 1) for w in weights.split()] == [2.0, -3.0, 0.5], weights
        assert mismatch == "FailedPreconditionError"


def test_tensorflow2_model_parallel_script(tmp_path):
    out = _run("tensorflow2_model_parallel_style.py", "--checkpoint-dir", str(tmp_path))
    finals = re.findall(r"\[(\d)\]<stdout>:rank \d first loss ([\d.]+) final loss ([\d.]+) "
                        r"tower checksum (\S+) fit loss", out)
    assert sorted(f[0] for f in finals) == ["0", "1"], out[-2000:]
    assert len({f[3] for f in finals}) == 1, f"shared towers diverged: {finals}"
    for _, first, final, _ in finals:
        assert float(final) < float(first), finals
    assert os.path.exists(tmp_path / "best_tower.keras")
