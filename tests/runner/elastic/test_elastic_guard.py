"""A worker never outlives the guard process the launcher starts it under.

The guard (fuse/runner/orphan_guard.py) is the launcher's direct child and the leader of the
worker's process group.  When it is SIGKILLed, the worker under it dies too (its parent-death
signal), the driver kills what is left of the group, blacklists the host and goes on; once the
host's cool-down ends the driver starts a new worker in the slot and the job finishes with
every batch applied once.  Before, the worker trained on, re-parented to init, and joined the
next generation beside the replacement as a ghost.

The rendezvous also refuses a process whose incarnation (the generation it was started for) is
not the one the plan names for its slot, with a message saying so; and the store's ``get``
says which key vanished instead of failing an assertion."""

from __future__ import annotations

import subprocess
import sys

import pytest

from elastic_util import HERE, check_training, fuserun, job_env, progress
from fuse.cluster import elastic_protocol as protocol
from fuse.cluster.store import FileStore, KVStoreServer, StoreKeyMissing
from fuse.config import Config
from fuse.worker import elastic_rendezvous

pytestmark = pytest.mark.timeout(180)

WORKER = str(HERE / "workers_elastic_numpy.py")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_worker_whose_guard_is_killed_dies_with_it_and_the_job_finishes(tmp_path):
    batches = 120
    argv = fuserun("-np", "3", "--min-np", "2", "--blacklist-cooldown-range", "1", "2",
                   "-H", "localhost:1,127.0.0.1:1,127.0.0.2:1", sys.executable, WORKER,
                   str(tmp_path), str(batches), "killguard:0:1:10")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=150,
                          env=job_env({"STEP_SLEEP": "0.02"}), cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-4000:]
    ghost = int((tmp_path / "ghost.pid").read_text())
    assert not (tmp_path / "ghost.survived").exists(), "the worker outlived its guard"
    assert not _alive(ghost), "the worker outlived its guard"
    assert "was killed by signal SIGKILL" in proc.stderr, proc.stderr[-3000:]
    assert "cool-down ended" in proc.stderr, proc.stderr[-3000:]
    # the slot was filled again by a new process: the job ended on 3 workers
    res = check_training(tmp_path, batches, expect_workers=3)
    assert {r["size"] for r in res} == {3}
    assert 2 in {s for _g, s, _n in progress(tmp_path)}


def _config(store: KVStoreServer, host: str, local_rank: int) -> Config:
    return Config.from_env(rendezvous_addr="127.0.0.1", rendezvous_port=store.port,
                           hostname=host, local_rank=local_rank, elastic=True,
                           elastic_timeout=5.0)


def test_the_rendezvous_refuses_a_process_of_another_incarnation(tmp_path, monkeypatch,
                                                                 capsys):
    server = KVStoreServer().start()
    try:
        monkeypatch.setenv("FUSE_SECRET_KEY", server.secret.hex())
        me = "hostb:0"
        entry = {"rank": 1, "size": 2, "local_rank": 0, "local_size": 1, "cross_rank": 1,
                 "cross_size": 2, "hostname": "hostb", "incarnation": 4}
        server.put(protocol.PLAN_KEY.format(g=4), protocol.encode_plan({me: entry}, True))
        server.put(protocol.GENERATION_KEY, b"4")
        monkeypatch.setenv(protocol.INCARNATION_ENV, "2")
        monkeypatch.setattr(elastic_rendezvous, "_worker", None)
        with pytest.raises(elastic_rendezvous.WorkerSuperseded) as refused:
            elastic_rendezvous.join(_config(server, "hostb", 0), after=2)
        assert refused.value.code == 1
        text = capsys.readouterr().err
        assert ("worker hostb:0 was started for generation 2, but generation 4 runs the "
                "process started in its place for generation 4") in text, text
        # it never said it was ready: the driver waits for the real one only
        assert server.keys(protocol.READY_PREFIX.format(g=4)) == []
        # the process the plan names joins
        monkeypatch.setenv(protocol.INCARNATION_ENV, "4")
        server.put(protocol.GO_KEY.format(g=4), b"1")
        identity = elastic_rendezvous.join(_config(server, "hostb", 0), after=2)
        assert identity["rank"] == 1 and identity["rendezvous_generation"] == 4
        assert server.get(protocol.READY_KEY.format(g=4, worker=me)) == b"4"
    finally:
        server.stop()


class _DroppingStore(FileStore):
    """A real file store whose key is dropped (by its owner) right after it appeared."""

    def wait(self, keys, timeout=30.0):
        super().wait(keys, timeout)
        for k in keys:
            self.delete(k)


def test_a_key_that_vanishes_is_an_error_naming_it(tmp_path):
    store = _DroppingStore(str(tmp_path / "store"))
    store.set("gloo/3/rank1", b"addr")
    with pytest.raises(StoreKeyMissing) as missing:
        store.get("gloo/3/rank1", timeout=1)
    assert "key 'gloo/3/rank1' appeared in the store and was removed" in str(missing.value)
