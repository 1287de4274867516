import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


@pytest.fixture(scope="session")
def fuserun_training(tmp_path_factory):
    """Each rank's result of integration_training.py run by ``fuserun -np 2``, in rank
    order: what the integrations must reproduce."""
    import json

    import needs
    needs.module("torch")
    out = str(tmp_path_factory.mktemp("fuserun") / "result")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FUSE_", "HOROVOD_"))}
    proc = subprocess.run([sys.executable, "-m", "fuse.runner.launch", "-np", "2",
                           sys.executable, os.path.join(HERE, "integration_training.py"), out],
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
    from spark_session import local_spark
    with local_spark("local[2]") as session:
        yield session
