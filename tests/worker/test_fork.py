"""os.fork() after init(): the child's engine thread did not come along and its connections
are the parent's, so its first fuse call must fail at once with an error that says what to do
(before: the child's first collective blocked with no message, or ran over the parent's
connections).  The parent must not notice, and the child may start a job of its own.  Real
workers over Gloo through fuse.run."""

from __future__ import annotations

import pytest

from engine_util import run_job

pytestmark = pytest.mark.timeout(120)


def _fork_after_init(mode: str):
    import json
    import os

    import numpy as np
    import fuse

    fuse.init()
    r, n = fuse.rank(), fuse.size()
    first = fuse.allreduce(np.full(4, r + 1.0), name="before.fork", op=fuse.Sum)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:                # the child: report through the pipe, never return
        os.close(read_end)
        seen = {}
        try:
            fuse.allreduce(np.ones(4), name="in.child", op=fuse.Sum)
            seen["allreduce"] = "returned"
        except Exception as e:
            seen["allreduce"] = f"{type(e).__name__}: {e}"
        try:
            fuse.rank()
            seen["rank"] = "returned"
        except Exception as e:
            seen["rank"] = f"{type(e).__name__}: {e}"
        if mode == "reinit":        # a job of its own: one rank, no launcher
            fuse.init(rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1)
            seen["own_job"] = fuse.allreduce(np.full(3, 7.0), name="own", op=fuse.Sum).tolist()
            fuse.shutdown()
        os.write(write_end, json.dumps(seen).encode())
        os.close(write_end)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        child = json.loads(f.read() or b"{}")
    _, status = os.waitpid(pid, 0)
    # the parent carries on over its own connections, with the right answers
    after = [fuse.allreduce(np.full(1000, float(i + r)), name=f"after.fork.{i}", op=fuse.Sum)
             for i in range(3)]
    expect = [float(sum(i + k for k in range(n))) for i in range(3)]
    fuse.shutdown()
    return {"child": child, "status": os.waitstatus_to_exitcode(status),
            "first_ok": bool((first == n * (n + 1) / 2).all()),
            "after_ok": all(bool((a == e).all()) for a, e in zip(after, expect))}


@pytest.mark.parametrize("mode", ["error", "reinit"])
def test_fork_after_init(mode):
    results = run_job(_fork_after_init, 2, args=(mode,), timeout=60)
    for r, res in enumerate(results):
        child = res["child"]
        assert res["status"] == 0, (r, res)
        assert res["first_ok"] and res["after_ok"], (r, res)
        for call in ("allreduce", "rank"):
            assert child[call].startswith("ValueError: fuse was initialized in process"), \
                (r, call, child)
            assert "call fuse.init() in the child" in child[call], (r, call, child)
        if mode == "reinit":
            assert child["own_job"] == [7.0, 7.0, 7.0], (r, child)


def _init_in_forked_children(pause_rank: int):
    """Each rank forks two children one after the other, as a forked test harness does
    (Horovod's CI: ``horovodrun pytest --forked``); every child inits, reduces and leaves
    without shutdown().  ``pause_rank`` starts its second child late, so the other rank's
    second child looks up its address while only the first child's is there to find."""
    import json
    import os
    import time

    import numpy as np
    import fuse

    r = int(os.environ["FUSE_RANK"])
    outcomes = []
    for k in range(2):
        if k == 1 and r == pause_rank:
            time.sleep(2.0)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            try:
                fuse.init()
                out = fuse.allreduce(np.full(3, float(r + 1)), name=f"child{k}", op=fuse.Sum)
                # Both ranks are past init() once the allreduce returns: the addresses the
                # world published must be gone (a fresh process's first epoch is 0).
                from fuse.cluster.store import store_from_config
                from fuse.config import Config
                store = store_from_config(Config.from_env())
                left = [i for i in range(2) if store.try_get(f"gloo/0/g0/{i}") is not None]
                seen = [out.tolist(), left]
            except Exception as e:
                seen = f"{type(e).__name__}: {e}"
            os.write(write_end, json.dumps(seen).encode())
            os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as f:
            outcomes.append(json.loads(f.read() or b'"no answer"'))
        os.waitpid(pid, 0)
    return outcomes


def test_init_again_in_a_new_process_of_the_same_rank():
    # Before: the first children's addresses stayed in the store, and a second child counts
    # its rendezvous epochs from 0 again, so it could connect to the first child's address:
    # "gloo: cannot connect group rank 1 of 2 (rendezvous keys 'gloo/0/g0/*'): connect
    # [127.0.0.1]:<port>: Connection refused" (when it is the side of the pair that dials).
    results = run_job(_init_in_forked_children, 2, args=(1,), timeout=90)
    for r, outcomes in enumerate(results):
        assert outcomes == [[[3.0, 3.0, 3.0], []], [[3.0, 3.0, 3.0], []]], (r, outcomes)
