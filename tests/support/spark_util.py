"""A local SparkSession for the tests, and a stop that takes its JVM down with it."""

import contextlib
import os
import shutil
import sys

import needs


@contextlib.contextmanager
def local_spark(master: str = "local[2]"):
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        needs.missing("spark", "no java on PATH and no JAVA_HOME")
    from pyspark.sql import SparkSession
    os.environ["PYSPARK_PYTHON"] = sys.executable      # the executors' Python: this one
    session = (SparkSession.builder.master(master).appName("fuse-spark-tests")
               .config("spark.ui.enabled", "false").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        stop_spark(session)


def stop_spark(session) -> None:
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
