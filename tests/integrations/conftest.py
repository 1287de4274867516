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
    import shutil

    import needs
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        needs.missing("spark", "no java on PATH and no JAVA_HOME")
    from pyspark.sql import SparkSession
    os.environ["PYSPARK_PYTHON"] = sys.executable      # the executors' Python: this one
    session = (SparkSession.builder.master("local[2]").appName("fuse-spark-tests")
               .config("spark.ui.enabled", "false").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        _stop_spark(session)


def _stop_spark(session) -> None:
    """Stop the session and its JVM: SparkSession.stop() keeps the JVM for the rest of the
    process, which here is the rest of the test suite."""
    from pyspark import SparkContext
    gateway = SparkContext._gateway
    session.stop()
    if gateway is None:
        return
    gateway.shutdown()
    proc = getattr(gateway, "proc", None)     # the JVM pyspark started (launch_gateway)
    if proc is not None:
        proc.kill()
        proc.wait(timeout=30)
    SparkContext._gateway = SparkContext._jvm = None
