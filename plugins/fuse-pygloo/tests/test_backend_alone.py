"""The backend class on its own, as fuse's registry sees it and with two processes of a job
(no engine): the entry point, a rendezvous through a store directory, the job's secret."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.timeout(120)

CTX = multiprocessing.get_context("spawn")


def test_registered_and_loadable():
    from fuse.backends import load_backend

    import fuse_pygloo

    assert load_backend("pygloo") is fuse_pygloo.PyglooBackend
    info = subprocess.run([sys.executable, "-m", "fuse.info"], capture_output=True, text=True,
                          timeout=60)
    line = [ln for ln in info.stdout.splitlines() if ln.strip().startswith("pygloo")]
    assert line and "available" in line[0] and "fuse-pygloo" in line[0], info.stdout


def _rank(rank, path, secret, results):
    from fuse.config import Config
    from fuse.cluster.store import SECRET_ENV

    from fuse_pygloo import PyglooBackend

    os.environ["FUSE_RENDEZVOUS_DIR"] = path
    os.environ[SECRET_ENV] = secret
    try:
        backend = PyglooBackend(Config.from_env({}, rank=rank, size=2, gloo_timeout_seconds=20))
        buf = np.array([rank + 1], dtype=np.int32)
        backend.world.allreduce(buf, "int32", "sum")
        results.put((rank, int(buf[0]), ""))
        backend.close()
    except BaseException as err:  # reported to the test, with the rank
        results.put((rank, None, f"{type(err).__name__}: {err}"))


@pytest.mark.parametrize("same", [True, False], ids=["same-secret", "another-secret"])
def test_every_connection_proves_the_jobs_secret(tmp_path, same):
    """A peer without the job's secret (as a process that connected to a Gloo listener in a
    rank's place) is refused by name before any data travels; peers that have it connect."""
    secrets = ["ab" * 16, "ab" * 16 if same else "cd" * 16]
    results = CTX.Queue()
    procs = [CTX.Process(target=_rank, args=(r, str(tmp_path), secrets[r], results),
                         daemon=True) for r in range(2)]
    for p in procs:
        p.start()
    try:
        got = sorted(results.get(timeout=90) for _ in procs)
    finally:
        for p in procs:
            p.join(5)
            p.kill()
    for rank, total, error in got:
        if same:
            assert total == 3, error
        else:
            assert total is None, f"rank {rank} reduced with a peer that has another secret"
            assert (f"connections rank {rank} holds for rank(s) [{1 - rank}]" in error
                    and "did not prove the job's secret" in error and "pygloo" in error), error
