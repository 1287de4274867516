"""Elastic fuse on a real local Ray cluster (ray.cluster_utils, nodes of 1 CPU on this
machine): ElasticRayExecutor's workers survive one of them (rank 0 or 1) being SIGKILLed, and an elastic
RayExecutor (min_workers) grows when a node joins and shrinks when that node is removed.  The
survivors must end with the weights rebuilt from their log of committed steps, bit for bit
(workers_integrations_elastic.check)."""

import os
import sys
import threading

import needs
import pytest

ray = needs.module("ray")
needs.module("torch")

import workers_integrations_elastic  # noqa: E402
from fuse.ray import ElasticRayExecutor, RayExecutor  # noqa: E402

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
ray.cloudpickle.register_pickle_by_value(workers_integrations_elastic)
pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def cluster():
    """A head node of 1 CPU, where this driver runs, for the whole module."""
    from ray.cluster_utils import Cluster
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith(("FUSE_",
                                                                          "HOROVOD_"))}
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        ray.init(address=c.address, log_to_driver=False)
        yield c
    finally:
        ray.shutdown()
        c.shutdown()
        os.environ.update(saved)


@pytest.fixture
def second_node(cluster):
    """A second node of 1 CPU for one test; removed after it, unless the test did."""
    node = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    yield node
    if node in cluster.worker_nodes:
        cluster.remove_node(node)


@pytest.mark.parametrize("victim", [1, 0])
def test_a_killed_worker_leaves_the_others_training(second_node, tmp_path, victim):
    settings = ElasticRayExecutor.create_settings(min_np=1, max_np=2, elastic_timeout=60,
                                                  timeout_s=60)
    executor = ElasticRayExecutor(settings, cpus_per_slot=1)
    executor.start()
    out, epochs = str(tmp_path), 2
    results = executor.run(lambda: workers_integrations_elastic.train(out, epochs,
                                                          [("kill", 0, victim, 7)]))
    workers_integrations_elastic.check(results, 1, epochs)
    assert results[0]["generation"] == 1
    sizes = [p[1] for p in workers_integrations_elastic.progress(out)]
    assert sizes[0] == 2 and sizes[-1] == 1, sizes
    failures = executor.last_job.failures
    assert len(failures) == 1 and "SIGKILL" in failures[0].what, failures


def test_a_node_joining_grows_the_job_and_its_removal_shrinks_it(cluster, tmp_path):
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), min_workers=1,
                           max_workers=2, cpus_per_worker=1, elastic_timeout=60)
    executor.start()
    out, epochs = str(tmp_path), 12
    outcome = {}

    def run():
        try:
            outcome["results"] = executor.run(workers_integrations_elastic.train,
                                              args=(out, epochs, (), 0.05))
        except BaseException as err:        # reported by the test's thread
            outcome["error"] = err

    driver = threading.Thread(target=run, daemon=True)
    driver.start()
    workers_integrations_elastic.wait_for(out, lambda p: len(p) >= 3, 90, "three steps on the head node")
    node = cluster.add_node(num_cpus=1)
    workers_integrations_elastic.wait_for(out, lambda p: any(s == 2 for _g, s, _n, _t in p), 90,
                              "the job growing to the new node")
    grown = len(workers_integrations_elastic.progress(out))
    workers_integrations_elastic.wait_for(out, lambda p: len(p) >= grown + 3, 60, "steps on two nodes")
    cluster.remove_node(node)
    driver.join(180)
    assert not driver.is_alive(), "the elastic job did not finish"
    assert "error" not in outcome, outcome.get("error")
    results = outcome["results"]
    workers_integrations_elastic.check(results, 1, epochs)
    sizes = [s for _g, s, _n, _t in workers_integrations_elastic.progress(out)]
    assert sizes[0] == 1 and 2 in sizes and sizes[-1] == 1, sizes
    assert results[0]["generation"] >= 2


def test_elastic_arguments_are_checked():
    with pytest.raises(ValueError, match="not both"):
        RayExecutor(RayExecutor.create_settings(), num_workers=2, min_workers=1)
    with pytest.raises(ValueError, match="give min_workers too"):
        RayExecutor(RayExecutor.create_settings(), num_workers=2, max_workers=3)
    with pytest.raises(ValueError, match="max_np=1 is below min_np=2"):
        ElasticRayExecutor.create_settings(min_num_proc=2, max_num_proc=1)
    with pytest.raises(ValueError, match="disagree"):
        ElasticRayExecutor.create_settings(min_np=2, min_num_proc=3)
    executor = RayExecutor(RayExecutor.create_settings(), min_workers=1)
    with pytest.raises(NotImplementedError, match="use run"):
        executor.execute(lambda w: 1)
    ex = ElasticRayExecutor(ElasticRayExecutor.create_settings(min_np=1))
    with pytest.raises(NotImplementedError, match="callbacks"):
        ex.run(lambda: 1, callbacks=[print])
    with pytest.raises(RuntimeError, match="start"):
        ex.run(lambda: 1)


def _raises():
    raise ValueError("rank data is bad")


def test_a_worker_that_raises_is_named_with_its_exception(cluster):
    """The only worker raises: the job cannot go on, and the error says why, naming the
    worker and its exception (chained as the cause)."""
    executor = ElasticRayExecutor(ElasticRayExecutor.create_settings(min_np=1,
                                                                     elastic_timeout=5))
    executor.start()
    with pytest.raises(RuntimeError, match="every worker failed") as info:
        executor.run(_raises)
    assert "raised ValueError: rank data is bad" in str(info.value), str(info.value)
    assert isinstance(info.value.__cause__, ValueError), info.value.__cause__
