"""fuse.ray across Ray nodes: a head node (1 CPU) and a second node (2 CPUs) on this machine
(ray.cluster_utils), so that ranks, local and cross ranks must follow the actors' nodes and the
driver's store must be reached over the network instead of loopback."""

import os
import sys

import needs
import pytest

ray = needs.module("ray")

from fuse.ray import RayExecutor  # noqa: E402

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def two_nodes():
    from ray.cluster_utils import Cluster
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith(("FUSE_",
                                                                          "HOROVOD_"))}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        cluster.add_node(num_cpus=2)
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        os.environ.update(saved)


def _identity():
    import numpy as np

    import fuse
    fuse.init()
    total = fuse.allreduce(np.ones(2) * (fuse.rank() + 1), op=fuse.Sum)
    return {"rank": fuse.rank(), "local_rank": fuse.local_rank(),
            "local_size": fuse.local_size(), "cross_rank": fuse.cross_rank(),
            "cross_size": fuse.cross_size(), "node": ray.get_runtime_context().get_node_id(),
            "store": os.environ["FUSE_GLOO_RENDEZVOUS_ADDR"], "sum": float(total[0])}


def _check_follows_nodes(ids):
    nodes = []
    for i in ids:
        if i["node"] not in nodes:
            nodes.append(i["node"])
    for i in ids:
        same = [j["rank"] for j in ids if j["node"] == i["node"]]
        assert same == list(range(min(same), max(same) + 1)), f"a node's ranks have gaps: {ids}"
        assert i["local_size"] == len(same) and i["local_rank"] == same.index(i["rank"]), ids
        peers = [n for n in nodes if sum(j["node"] == n for j in ids) > i["local_rank"]]
        assert (i["cross_rank"], i["cross_size"]) == (peers.index(i["node"]), len(peers)), ids
    return nodes


def test_ranks_follow_nodes(two_nodes):
    driver = ray.get_runtime_context().get_node_id()
    ex = RayExecutor(RayExecutor.create_settings(timeout_s=120), num_workers=3)
    ex.start()
    try:
        ids = ex.run(_identity)
    finally:
        ex.shutdown()
    assert [i["rank"] for i in ids] == [0, 1, 2]
    assert len(_check_follows_nodes(ids)) == 2, ids         # 3 CPUs on 2 nodes: both used
    assert {i["sum"] for i in ids} == {6.0}
    assert any(i["node"] != driver for i in ids)
    assert {i["store"] for i in ids} == {ray.util.get_node_ip_address()}    # not loopback


def test_num_hosts_spreads_one_worker_per_node(two_nodes):
    ex = RayExecutor(RayExecutor.create_settings(timeout_s=120), num_hosts=2,
                     num_workers_per_host=1)
    ex.start()
    try:
        ids = ex.run(_identity)
    finally:
        ex.shutdown()
    assert len({i["node"] for i in ids}) == 2, ids
    assert [(i["local_rank"], i["local_size"], i["cross_rank"], i["cross_size"]) for i in ids] \
        == [(0, 1, 0, 2), (0, 1, 1, 2)]
    assert {i["sum"] for i in ids} == {3.0}


def test_placement_that_cannot_be_granted_says_so(two_nodes):
    ex = RayExecutor(RayExecutor.create_settings(placement_group_timeout_s=3), num_hosts=3,
                     num_workers_per_host=1)
    with pytest.raises(TimeoutError, match="did not grant 3 bundle"):
        ex.start()
    assert ex.workers == []
