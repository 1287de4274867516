"""Every collective of the backend contract on pygloo, on real worker processes (2 and 3).

``group_suite`` calls the plugin's Group directly (every dtype pygloo reduces, every op,
uneven and empty blocks, every root, a group of some ranks only); ``api_suite`` goes through
fuse's engine with the inline and shared-memory paths off, so that every allreduce reaches
pygloo, and checks that a type pygloo cannot reduce is refused by name on every rank.
"""

from __future__ import annotations

import numpy as np
import pytest

from engine_util import Checker, assert_counts, data_kind, reduce_ref, split_rows
from engine_util import rank_array
from pygloo_util import pygloo_run_job

pytestmark = pytest.mark.timeout(120)

OPS = ("sum", "min", "max", "product")
REFUSED = ("bool", "int16", "uint16", "bfloat16")   # fuse types pygloo has no reduction for


def _bytes_of(sender: int, receiver: int, n: int) -> np.ndarray:
    """The block ``sender`` sends ``receiver`` in the alltoallv check: n recognisable bytes."""
    return ((np.arange(n) * 7 + sender * 31 + receiver * 5) % 251).astype(np.uint8)


def _allreduce(c: Checker, g, r: int, n: int) -> None:
    from fuse_pygloo import REDUCIBLE, UnsupportedDtype
    from fuse.backends.base import dtype_name_to_numpy

    for dt in REDUCIBLE:
        for op in OPS:
            tag = f"g.ar.{dt}.{op}"
            ins = [rank_array(dt, (37,), k, tag, data_kind(op)) for k in range(n)]
            buf = ins[r].copy()
            g.allreduce(buf, dt, op)
            c.array(buf, reduce_ref(ins, op), f"Group.allreduce {dt} {op}")
    for dt in REFUSED:
        buf = np.zeros(8, dtype_name_to_numpy(dt) if dt != "bool" else np.bool_)
        c.raises(UnsupportedDtype, lambda: g.allreduce(buf, dt, "sum"),
                 f"Group.allreduce refuses {dt}", match=(dt, "pygloo"))
    c.raises(ValueError, lambda: g.allreduce(np.zeros(2, np.float32), "float32", "average"),
             "Group.allreduce refuses an unknown op", match=("average", "pygloo"))


def _allgatherv(c: Checker, g, r: int, n: int) -> None:
    for sizes in ([(k * 5) % 7 for k in range(n)], [6] * n, [0] * n):
        mine = _bytes_of(r, r, sizes[r])
        out = np.full(sum(sizes) + 3, 255, np.uint8)      # longer than needed: tail untouched
        g.allgatherv(mine, out, sizes)
        want = np.concatenate([_bytes_of(k, k, sizes[k]) for k in range(n)] + [np.full(3, 255)])
        c.array(out, want.astype(np.uint8), f"Group.allgatherv sizes {sizes}")


def _broadcast(c: Checker, g, r: int, n: int) -> None:
    for root in range(n):
        buf = _bytes_of(r, root, 1001) if r == root else np.zeros(1001, np.uint8)
        g.broadcast(buf, root)
        c.array(buf, _bytes_of(root, root, 1001), f"Group.broadcast from {root}")


def _alltoallv(c: Checker, g, r: int, n: int) -> None:
    def size(s, d):
        return (s + 2 * d) % 4 * 3      # zeros among them

    send = np.concatenate([_bytes_of(r, d, size(r, d)) for d in range(n)])
    recvbytes = [size(s, r) for s in range(n)]
    out = np.zeros(sum(recvbytes), np.uint8)
    g.alltoallv(send, [size(r, d) for d in range(n)], out, recvbytes)
    want = np.concatenate([_bytes_of(s, r, size(s, r)) for s in range(n)])
    c.array(out, want, "Group.alltoallv with uneven and empty blocks")


def _reducescatter(c: Checker, g, r: int, n: int) -> None:
    counts = split_rows(10, n)
    ins = [rank_array("float32", (10,), k, "g.rs") for k in range(n)]
    buf = ins[r].copy()
    g.reducescatter(buf, counts, "float32", "sum")
    start = sum(counts[:r])
    c.array(buf[:counts[r]], reduce_ref(ins, "sum")[start:start + counts[r]],
            "Group.reducescatter")


def group_suite() -> int:
    import fuse
    from fuse.worker import state
    from fuse_pygloo import PyglooBackend

    fuse.init()
    r, n = fuse.rank(), fuse.size()
    c = Checker(r)
    backend = state.backend()
    c.true(isinstance(backend, PyglooBackend), "the job runs on the pygloo backend",
           type(backend).__name__)
    g = backend.world
    c.equal((g.rank, g.size), (r, n), "the world group's rank and size")
    _allreduce(c, g, r, n)
    _allgatherv(c, g, r, n)
    _broadcast(c, g, r, n)
    _alltoallv(c, g, r, n)
    _reducescatter(c, g, r, n)
    g.barrier()
    if r in (0, n - 1):     # a group of two that leaves out the middle rank of three
        pair = backend.create_group([0, n - 1], 1000)
        c.equal((pair.rank, pair.size), (0 if r == 0 else 1, 2), "a pair group's rank and size")
        ins = [rank_array("float64", (5,), k, "pair") for k in (0, n - 1)]
        buf = ins[0 if r == 0 else 1].copy()
        pair.allreduce(buf, "float64", "sum")
        c.array(buf, ins[0] + ins[1], "allreduce in a group of ranks 0 and last")
    c.raises(ValueError, lambda: backend.create_group([0, n], 1001),
             "create_group refuses a rank outside the world", match=("pygloo",))
    fuse.shutdown()
    return c.finish()


def api_suite() -> int:
    import fuse

    fuse.init()
    r, n = fuse.rank(), fuse.size()
    c = Checker(r)
    from fuse_pygloo import REDUCIBLE
    for dt in [d for d in REDUCIBLE if d not in ("uint32", "uint64")]:   # fuse has neither
        for op in ("average", "sum", "min", "max", "product"):
            if op == "average" and not dt.startswith("float"):
                continue
            tag = f"api.{dt}.{op}"
            ins = [rank_array(dt, (9, 100), k, tag, data_kind(op)) for k in range(n)]
            out = fuse.allreduce(ins[r], name=tag, op=getattr(fuse, op.capitalize()))
            c.array(out, reduce_ref(ins, op), f"fuse.allreduce {dt} {op}")
    # A backend's failure ends the engine (fuse cannot tell what a failed backend call left
    # half done on the other ranks): the refusal is the job's last collective, and every rank
    # gets fuse's error naming the tensor, with the plugin's naming the type and the backend.
    x = np.ones(4000, np.int16)
    c.raises(Exception, lambda: fuse.allreduce(x, name="api.refused.int16", op=fuse.Sum),
             f"fuse.allreduce of int16 is refused on rank {r}",
             match=("api.refused.int16", "int16 tensors", "pygloo backend"))
    fuse.shutdown()
    return c.finish()


@pytest.mark.parametrize("np_", [2, 3])
def test_every_group_collective(np_):
    assert_counts(pygloo_run_job(group_suite, np_), minimum=50)


@pytest.mark.parametrize("np_", [2, 3])
def test_engine_allreduces_reach_pygloo(np_):
    env = {"FUSE_INLINE_THRESHOLD": 0, "FUSE_SHM_THRESHOLD": 0}
    assert_counts(pygloo_run_job(api_suite, np_, env), minimum=30)
