"""fuse.spark.run on a real local Spark (local[2], one JVM per module): a torch training whose
weights match fuserun's, ranks and environment, and a rank that raises or is killed."""

import os
import signal
import sys
import time

import needs
import pytest

needs.module("pyspark", "spark")
needs.module("torch")

import workers_integrations_training  # noqa: E402

import fuse.spark  # noqa: E402
from fuse.runner.api import WorkerError  # noqa: E402

pytestmark = pytest.mark.timeout(300)
from paths_util import ROOT


def test_training_matches_fuserun(spark, fuserun_training):
    results = fuse.spark.run(workers_integrations_training.train, num_proc=2)
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["size"] == 2 and r["local_size"] == 2 for r in results)
    assert results[0]["weights"] == results[1]["weights"], "the replicas diverged"
    assert results[0]["weights"] == fuserun_training[0]["weights"], \
        "Spark's ranks trained to other weights than fuserun's"


def _identity(scale, offset=0):
    import numpy as np

    import fuse
    fuse.init()
    total = fuse.allreduce(np.ones(2) * (fuse.rank() + 1), op=fuse.Sum)
    return {"rank": fuse.rank(), "local_rank": fuse.local_rank(), "cross_size": fuse.cross_size(),
            "threads": os.environ["OMP_NUM_THREADS"], "sum": float(total[0]) * scale + offset,
            "secret": bool(os.environ.get("FUSE_SECRET_KEY")), "mark": os.environ.get("MARK")}


def test_ranks_args_and_environment(spark):
    env = dict(os.environ, MARK="from env")
    ids = fuse.spark.run(_identity, args=(2,), kwargs={"offset": 1}, num_proc=2, env=env)
    assert [i["rank"] for i in ids] == [0, 1] and [i["local_rank"] for i in ids] == [0, 1]
    assert {i["cross_size"] for i in ids} == {1}
    assert {i["sum"] for i in ids} == {7.0}
    assert {i["secret"] for i in ids} == {True} and {i["mark"] for i in ids} == {"from env"}
    from fuse.cluster import thread_budget
    assert {i["threads"] for i in ids} == {str(thread_budget.threads_per_worker(2))}  # fuserun's


def _fails_on_rank_1(how):
    import numpy as np

    import fuse
    fuse.init()
    if fuse.rank() == 1:
        if how == "raise":
            raise ValueError("rank one's data is bad")
        os.kill(os.getpid(), signal.SIGKILL)
    for _ in range(1000):   # rank 0 waits in collectives until fuse takes it down
        fuse.allreduce(np.ones(4), name="x")
    return "rank 0 was never stopped"


def test_mpi_says_it_is_not_there():
    with pytest.raises(NotImplementedError, match="Gloo only"):
        fuse.spark.run(lambda: 1, num_proc=2, use_mpi=True)


def test_rank_that_raises(spark):
    with pytest.raises(ValueError, match="rank one's data is bad") as info:
        fuse.spark.run(_fails_on_rank_1, args=["raise"], num_proc=2)
    cause = info.value.__cause__
    assert isinstance(cause, WorkerError) and cause.rank == 1, cause
    assert any("rank 1 of 2" in note for note in getattr(info.value, "__notes__", [])), \
        "the exception does not say which rank raised it"


def test_more_ranks_than_slots_time_out(spark):
    """Spark waits for 3 barrier slots that local[2] never has: start_timeout ends it (and
    the next test shows the context still works)."""
    with pytest.raises(WorkerError, match="not all 3 ranks started within 5 s"):
        fuse.spark.run(lambda: 1, num_proc=3, start_timeout=5)


def _rank_processes() -> list[int]:
    """Our descendants (through the JVM and its Python workers) that run a fuse rank."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    found = []
    for pid in parents:
        p = pid
        while p in parents and p != os.getpid():
            p = parents[p]
        if p == os.getpid() and pid != os.getpid():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"fuse.runner.run_task" in f.read():
                        found.append(pid)
            except OSError:
                pass
    return found


def test_rank_that_is_killed_then_the_context_runs_on(spark):
    with pytest.raises(WorkerError) as info:
        fuse.spark.run(_fails_on_rank_1, args=["kill"], num_proc=2)
    assert info.value.rank == 1, info.value
    assert "SIGKILL" in str(info.value), str(info.value)
    deadline = time.monotonic() + 30
    while _rank_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _rank_processes() == [], "a rank process outlived the failed job"
    assert fuse.spark.run(lambda: "again", num_proc=2) == ["again", "again"]


@pytest.fixture(scope="module")
def python_without_fuse(tmp_path_factory) -> str:
    """A Python of this one's version without fuse (nor its dependencies): a fresh virtualenv
    without pip, made from this interpreter's own base."""
    import subprocess
    import venv
    where = tmp_path_factory.mktemp("python-without-fuse")
    venv.EnvBuilder(with_pip=False, symlinks=True).create(where)
    python = str(where / "bin" / "python")
    probe = subprocess.run([python, "-c", "import sys; print(sys.version_info[:2]); import fuse"],
                           capture_output=True, text=True, cwd=where, timeout=60)
    assert probe.stdout.strip() == str(sys.version_info[:2]), probe
    assert probe.returncode != 0, f"{python} imports fuse: it cannot stand for a Python without"
    return python


def test_workers_that_cannot_import_fuse_get_one_line_naming_pyspark_python(
        spark, python_without_fuse):
    """Spark starts its Python workers with PYSPARK_PYTHON (else python3 from PATH), not the
    driver's Python: a driver run as .venv/bin/python without activating it ships the job to
    a Python without fuse.  Here that Python is a fresh virtualenv's (no fuse, the same
    version, as PySpark requires)."""
    bare = python_without_fuse
    sc = spark.sparkContext
    saved = sc.pythonExec
    sc.pythonExec = bare        # what PYSPARK_PYTHON sets when the context starts
    try:
        with pytest.raises(fuse.spark.WorkersCannotImportFuse) as info:
            fuse.spark.run(_identity, args=(1,), num_proc=2)
    finally:
        sc.pythonExec = saved
    message = str(info.value)
    assert "\n" not in message, message
    # "No module named 'fuse'", or (run from a source tree, which the worker's cwd puts on its
    # path) one of fuse's dependencies
    assert "cannot import fuse (ModuleNotFoundError: No module named" in message, message
    assert bare in message, message
    assert f"PYSPARK_PYTHON={sys.executable}" in message, message


def test_horovod_style_script(spark, capsys, monkeypatch):
    """examples/spark_torch_style.py is a Horovod-on-Spark script with its imports changed.
    It runs here as its own __main__, on this module's Spark (its getOrCreate() finds it; a
    JVM of its own would cost 10-30 s), which it stops at the end: the module's last test."""
    import runpy
    script = os.path.join(ROOT, "examples", "spark_torch_style.py")
    with open(script) as f:
        text = f.read()
    assert "import fuse.spark" in text and "import fuse.torch as hvd" in text
    monkeypatch.setattr(sys, "argv", [script, "--num-proc", "2", "--epochs", "2"])
    runpy.run_path(script, run_name="__main__")
    assert "ranks [0, 1] agree" in capsys.readouterr().out
