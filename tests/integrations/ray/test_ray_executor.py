"""fuse.ray on a real local Ray cluster (2 CPUs, one per module): a torch training whose weights
match fuserun's, ranks by node, Horovod's executor verbs, and a worker that raises or dies."""

import os
import signal
import subprocess
import sys

import needs
import pytest

ray = needs.module("ray")
needs.module("torch")

import workers_integrations_training  # noqa: E402

from fuse.ray import RayExecutor  # noqa: E402
from fuse.runner.api import WorkerError  # noqa: E402

# the actors import nothing from tests/: the functions here travel by value, as functions
# defined in a user's script do
ray.cloudpickle.register_pickle_by_value(workers_integrations_training)
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.timeout(300)
from paths_util import ROOT


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster with 2 CPUs for the whole module (Ray starts slowly)."""
    env = {k: v for k, v in os.environ.items() if k.startswith(("FUSE_", "HOROVOD_"))}
    for k in env:       # the actors inherit the driver's environment: no outer job's identity
        del os.environ[k]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
        os.environ.update(env)


@pytest.fixture
def executor(cluster):
    ex = RayExecutor(RayExecutor.create_settings(timeout_s=120), num_workers=2,
                     cpus_per_worker=1)
    ex.start()
    try:
        yield ex
    finally:
        ex.shutdown()


def test_training_matches_fuserun(executor, fuserun_training):
    results = executor.run(workers_integrations_training.train)
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["size"] == 2 and r["local_size"] == 2 for r in results)
    assert results[0]["weights"] == results[1]["weights"], "the replicas diverged"
    assert results[0]["weights"] == fuserun_training[0]["weights"], \
        "Ray's workers trained to other weights than fuserun's"


class Counter:
    """An executable object kept in each actor between calls (start(executable_cls=...))."""

    def __init__(self, start):
        self.value = start

    def bump(self):
        self.value += 1
        return self.value


def _identity():
    import fuse
    fuse.init()
    return {"rank": fuse.rank(), "local_rank": fuse.local_rank(), "cross_size": fuse.cross_size(),
            "node": ray.get_runtime_context().get_node_id(),
            "hostname": os.environ["FUSE_HOSTNAME"], "threads": os.environ["OMP_NUM_THREADS"],
            "sum": float(fuse.allreduce(__import__("numpy").ones(2) * (fuse.rank() + 1),
                                        op=fuse.Sum)[0])}


def test_ranks_follow_nodes_and_executor_verbs(cluster):
    ex = RayExecutor(RayExecutor.create_settings(timeout_s=120), num_hosts=1,
                     num_workers_per_host=2, cpus_per_worker=1)
    ex.start(executable_cls=Counter, executable_args=[10],
             extra_env_vars={"FUSE_TEST_MARK": "given"})
    try:
        ids = ex.run(_identity)
        node = ray.get_runtime_context().get_node_id()      # one node: the driver's
        assert [i["rank"] for i in ids] == [0, 1]
        assert [i["local_rank"] for i in ids] == [0, 1]
        assert {i["node"] for i in ids} == {node} and {i["cross_size"] for i in ids} == {1}
        assert {i["hostname"] for i in ids} == {ray.util.get_node_ip_address()}
        assert {i["sum"] for i in ids} == {3.0}
        assert {i["threads"] for i in ids} == {"1"}         # one CPU per actor
        assert ex.execute(lambda counter: counter.bump()) == [11, 11]
        assert ex.execute_single(lambda counter: counter.bump()) == 12
        assert ex.execute(lambda counter: counter.value) == [12, 11]
        assert ex.run(lambda: os.environ["FUSE_TEST_MARK"]) == ["given", "given"]
        refs = ex.run_remote(lambda x: x * 2, args=[21])
        assert ray.get(refs) == [42, 42]
    finally:
        ex.shutdown()


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


def test_worker_that_raises(executor):
    with pytest.raises(ValueError, match="rank one's data is bad") as info:
        executor.run(_fails_on_rank_1, args=["raise"])
    cause = info.value.__cause__
    assert isinstance(cause, WorkerError) and cause.rank == 1, cause
    assert "rank 1 of 2" in str(cause)
    assert any("rank 1 of 2" in note for note in getattr(info.value, "__notes__", [])), \
        "the exception does not say which worker raised it"


def test_worker_that_is_killed(executor):
    pid = executor.placements[1][3]
    with pytest.raises(WorkerError) as info:
        executor.run(_fails_on_rank_1, args=["kill"])
    assert info.value.rank == 1, info.value
    assert "died" in str(info.value) and f"pid {pid}" in str(info.value), str(info.value)


def test_horovod_style_script(cluster):
    """examples/ray_torch_style.py is Horovod's Ray example with its imports changed; it
    runs against this module's cluster (RAY_ADDRESS)."""
    script = os.path.join(ROOT, "examples", "ray_torch_style.py")
    with open(script) as f:
        text = f.read()
    assert "from fuse.ray import RayExecutor" in text and "import fuse.torch as hvd" in text
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FUSE_", "HOROVOD_"))}
    env["RAY_ADDRESS"] = cluster
    proc = subprocess.run([sys.executable, script, "--num-workers", "2"], capture_output=True,
                          text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "ranks [0, 1] agree" in proc.stdout, proc.stdout[-2000:]
