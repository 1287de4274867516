"""fuse.runner.worker_env: identities from the hosts Ray or Spark placed workers on."""

from fuse.cluster.store import SECRET_ENV, KVStoreServer
from fuse.runner.worker_env import DriverStore, root_cause, slots_for_hosts, worker_env


def test_ranks_are_contiguous_per_host_in_worker_order():
    slots = slots_for_hosts(["node-b", "node-a", "node-b", "node-c", "node-a"],
                            {"node-a": "10.0.0.1"})
    # node-b appears first: its workers (0 and 2) get ranks 0 and 1
    assert [s.rank for s in slots] == [0, 2, 1, 4, 3]
    assert [s.local_rank for s in slots] == [0, 0, 1, 0, 1]
    assert [s.local_size for s in slots] == [2, 2, 2, 1, 2]
    assert [s.hostname for s in slots] == ["node-b", "10.0.0.1", "node-b", "node-c", "10.0.0.1"]
    # cross ranks: local rank 0 lives on three hosts, local rank 1 on two
    assert [(s.cross_rank, s.cross_size) for s in slots] == [(0, 3), (1, 3), (0, 2), (2, 3),
                                                             (1, 2)]
    assert {s.size for s in slots} == {5}


def test_job_env_and_thread_budget():
    store = DriverStore()
    try:
        slot = slots_for_hosts(["h", "h"])[1]
        env = store.job_env(slot)
        assert env["FUSE_RANK"] == env["HOROVOD_RANK"] == "1"
        assert env["FUSE_GLOO_RENDEZVOUS_ADDR"] == "127.0.0.1"
        assert env["FUSE_GLOO_RENDEZVOUS_PORT"] == str(store.port)
        assert bytes.fromhex(env[SECRET_ENV]) == store.secret
        assert env["FUSE_GLOO_IFACE"]                   # loopback for a one-machine job
        given = worker_env(env, {"PATH": "/bin", "MKL_NUM_THREADS": "3"})
        assert "MKL_NUM_THREADS" not in given           # a variable already set stays
        assert given["OMP_NUM_THREADS"] == given["TF_NUM_INTRAOP_THREADS"]
        assert int(given["OMP_NUM_THREADS"]) >= 1
        assert given["FUSE_RANK"] == "1" and "PATH" not in given
        assert worker_env(env, {"OMP_NUM_THREADS": "4"})["MKL_NUM_THREADS"] == "4"
    finally:
        store.close()


def test_root_cause_skips_ranks_that_failed_because_of_another():
    server = KVStoreServer().start()
    try:
        server.put("errors/0", b"ShutdownError: rank 2 failed")
        server.put("errors/0/consequence", b"1")
        assert root_cause([0, 2, 1], server) == 2
        server.put("errors/2/consequence", b"1")
        assert root_cause([0, 2, 1], server) == 1
        server.put("errors/1/consequence", b"1")
        assert root_cause([0, 2, 1], server) == 0       # all victims: the first seen
    finally:
        server.stop()
