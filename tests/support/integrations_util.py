"""Fixtures the integration tests share (tests/integrations/*/conftest.py import them): what
fuserun itself trains, which each integration must reproduce, and one local Spark per module.

tests/integrations itself has no conftest.py: pytest would put that folder on sys.path, where
its ray/ and lightning/ folders would import as namespace packages of those names wherever the
real Ray or Lightning is missing."""

import os
import subprocess
import sys

import pytest

from paths_util import support


@pytest.fixture(scope="session")
def fuserun_training(tmp_path_factory):
    """Each rank's result of workers_integrations_training.py run by ``fuserun -np 2``, in rank
    order: what the integrations must reproduce."""
    import json

    import needs
    needs.module("torch")
    out = str(tmp_path_factory.mktemp("fuserun") / "result")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FUSE_", "HOROVOD_"))}
    proc = subprocess.run([sys.executable, "-m", "fuse.runner.launch", "-np", "2",
                           sys.executable, support("workers_integrations_training.py"), out],
                          capture_output=True, text=True, timeout=200, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = []
    for rank in range(2):
        with open(f"{out}.{rank}") as f:
            results.append(json.load(f))
    return results


@pytest.fixture(scope="module")
def spark():
    """A local Spark with 2 task slots for the whole module (the JVM starts slowly)."""
    from spark_util import local_spark
    with local_spark("local[2]") as session:
        yield session
