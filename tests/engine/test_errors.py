"""Errors that every rank must see the same way: mismatched shape/dtype/op/root/kind/scale across
ranks (MismatchError on every rank, naming the tensor, the ranks and both values, and the job
carries on), a name submitted twice while in flight, calls after shutdown, a peer that shuts
down while others wait."""

from __future__ import annotations

import time

import numpy as np
import pytest

from engine_util import Checker, assert_counts, rank_array, reduce_ref, run_job

pytestmark = pytest.mark.timeout(120)


def _shape_forms(shape) -> tuple:
    """The ways a message may spell a shape: [2, 3] or (2, 3)."""
    inner = ", ".join(map(str, shape))
    return (f"[{inner}]", f"({inner})", f"({inner},)")


# ------------------------------------------------------------------------ worker side

def mismatch_suite() -> int:
    import fuse
    import os
    n = int(os.environ["FUSE_SIZE"])
    ps = fuse.ProcessSet([1, 2]) if n == 3 else None
    fuse.init(process_sets=[ps] if ps else None)
    r = fuse.rank()
    odd = n - 1          # the rank that disagrees with the others
    is_odd = r == odd
    c = Checker(r)
    healthy_count = [0]

    def healthy(after: str) -> None:
        """A correct collective right after the error: the job is still usable."""
        healthy_count[0] += 1
        tag = f"healthy.{healthy_count[0]}"
        ins = [rank_array("float32", (6,), k, tag) for k in range(n)]
        c.array(fuse.allreduce(ins[r], name=tag, op=fuse.Sum), reduce_ref(ins, "sum"),
                f"allreduce after {after}")
        big = [rank_array("int32", (30000,), k, tag) for k in range(n)]
        c.array(fuse.allreduce(big[r], name=tag + ".big", op=fuse.Sum), reduce_ref(big, "sum"),
                f"large allreduce after {after}")

    def expect(label: str, fn, name: str, *values) -> None:
        """Every rank raises MismatchError naming ``name``, the odd rank, another rank, and each
        of ``values`` (tuples of acceptable spellings)."""
        t0 = time.monotonic()
        err = c.raises(fuse.MismatchError, fn, label, match=(name,))
        c.true(time.monotonic() - t0 < 10, f"{label}: raised promptly",
               f"after {time.monotonic() - t0:.1f} s")
        if isinstance(err, fuse.MismatchError):
            msg = str(err)
            c.true(isinstance(err, fuse.HorovodInternalError) and isinstance(err, ValueError),
                   f"{label}: MismatchError is a HorovodInternalError and a ValueError")
            c.true(f"rank {odd}" in msg, f"{label}: names the odd rank {odd}", msg)
            c.true(any(f"rank {k}" in msg for k in range(n) if k != odd),
                   f"{label}: names another rank", msg)
            for spellings in values:
                c.true(any(s in msg for s in spellings), f"{label}: mentions {spellings[0]}", msg)
        healthy(label)

    s1, s2 = ((4,), (3,)) if is_odd else ((3,), (4,))
    expect("allreduce shape", lambda: fuse.allreduce(np.zeros(s1, np.float32),
                                                     name="mm.shape", op=fuse.Sum),
           "mm.shape", _shape_forms((3,)), _shape_forms((4,)))
    shape = (3, 2) if is_odd else (2, 3)
    expect("allreduce 2-d shape", lambda: fuse.allreduce(np.zeros(shape), name="mm.shape2d"),
           "mm.shape2d", _shape_forms((2, 3)), _shape_forms((3, 2)))
    big = (40001,) if is_odd else (40000,)
    expect("large allreduce shape", lambda: fuse.allreduce(np.zeros(big, np.float64),
                                                           name="mm.bigshape"),
           "mm.bigshape", _shape_forms((40000,)), _shape_forms((40001,)))
    dt = np.int32 if is_odd else np.float32
    expect("allreduce dtype", lambda: fuse.allreduce(np.zeros(5, dt), name="mm.dtype",
                                                     op=fuse.Sum),
           "mm.dtype", ("float32",), ("int32",))
    op = fuse.Max if is_odd else fuse.Sum
    expect("allreduce op", lambda: fuse.allreduce(np.zeros(5), name="mm.op", op=op),
           "mm.op", ("Sum", "SUM", "sum"), ("Max", "MAX", "max"))
    pre = 3.5 if is_odd else 1.0
    expect("allreduce prescale", lambda: fuse.allreduce(np.zeros(5), name="mm.scale",
                                                        op=fuse.Sum, prescale_factor=pre),
           "mm.scale", ("3.5",))
    root = 1 if is_odd else 0
    expect("broadcast root", lambda: fuse.broadcast(np.zeros(4), root, name="mm.root"),
           "mm.root", ("root 0", "root_rank 0", "root rank 0"),
           ("root 1", "root_rank 1", "root rank 1"))
    expect("broadcast shape", lambda: fuse.broadcast(np.zeros(s1), 0, name="mm.bshape"),
           "mm.bshape", _shape_forms((3,)), _shape_forms((4,)))
    tail = (2, 5) if is_odd else (2, 3)
    expect("allgather trailing dimension",
           lambda: fuse.allgather(np.zeros(tail, np.int64), name="mm.gather"),
           "mm.gather", _shape_forms((2, 3)), _shape_forms((2, 5)))
    expect("allgather dtype", lambda: fuse.allgather(np.zeros((r + 1, 2), dt), name="mm.gdt"),
           "mm.gdt", ("float32",), ("int32",))
    rows = (9,) if is_odd else (6,)
    expect("reducescatter shape", lambda: fuse.reducescatter(np.zeros(rows), name="mm.rs"),
           "mm.rs", _shape_forms((6,)), _shape_forms((9,)))
    expect("alltoall trailing dimension",
           lambda: fuse.alltoall(np.zeros((n, 3 if is_odd else 2)), name="mm.a2a"),
           "mm.a2a", _shape_forms((n, 2)), _shape_forms((n, 3)))

    def kinds():
        if is_odd:
            return fuse.allgather(np.zeros((2, 2)), name="mm.kind")
        return fuse.allreduce(np.zeros((2, 2)), name="mm.kind")
    expect("operation kind", kinds, "mm.kind", ("allreduce", "ALLREDUCE"),
           ("allgather", "ALLGATHER"))

    # async: the error comes out of synchronize()
    def async_mismatch():
        h = fuse.allreduce_async(np.zeros(s1), name="mm.async", op=fuse.Sum)
        return fuse.synchronize(h)
    expect("async allreduce shape", async_mismatch, "mm.async", _shape_forms((3,)),
           _shape_forms((4,)))

    # one bad member of a group fails the whole group on every rank
    def grouped():
        xs = [np.ones(3), np.ones(s1), np.ones(7)]
        return fuse.grouped_allreduce(xs, name="mm.group", op=fuse.Sum)
    expect("grouped allreduce", grouped, "mm.group", _shape_forms((3,)), _shape_forms((4,)))

    # a name that is already cached, then changes shape on one rank only
    for step in range(3):
        ins = [rank_array("float32", (5,), k, f"cached.{step}") for k in range(n)]
        c.array(fuse.allreduce(ins[r], name="mm.cached", op=fuse.Sum), reduce_ref(ins, "sum"),
                f"cached name, step {step}")
    cshape = (6,) if is_odd else (5,)
    expect("cached name, new shape on one rank",
           lambda: fuse.allreduce(np.zeros(cshape, np.float32), name="mm.cached", op=fuse.Sum),
           "mm.cached", _shape_forms((5,)), _shape_forms((6,)))
    ins = [rank_array("float32", (5,), k, "cached.after") for k in range(n)]
    c.array(fuse.allreduce(ins[r], name="mm.cached", op=fuse.Sum), reduce_ref(ins, "sum"),
            "cached name works again after the mismatch")

    # inside a process set: only its members take part and raise
    if ps is not None:
        if ps.included():
            t0 = time.monotonic()
            shape = (2,) if is_odd else (5,)
            err = c.raises(fuse.MismatchError,
                           lambda: fuse.allreduce(np.zeros(shape), name="mm.set", process_set=ps),
                           "mismatch inside a process set", match=("mm.set", "rank 2", "rank 1"))
            c.true(err is None or any(f in str(err) for f in _shape_forms((2,))),
                   "the set mismatch names the odd shape", str(err))
            c.true(time.monotonic() - t0 < 10, "set mismatch raised promptly")
            ins = {k: rank_array("float32", (4,), k, "set.after") for k in (1, 2)}
            c.array(fuse.allreduce(ins[r], name="mm.set", op=fuse.Sum, process_set=ps),
                    reduce_ref([ins[1], ins[2]], "sum"), "the set works after its mismatch")
        healthy("a mismatch inside a process set")

    # several mismatches in flight at once, each reported on its own
    hs = [fuse.allreduce_async(np.zeros((3 + i + (1 if is_odd else 0),)), name=f"mm.many.{i}",
                               op=fuse.Sum) for i in range(4)]
    for i, h in enumerate(hs):
        c.raises(fuse.MismatchError, lambda h=h: fuse.synchronize(h), f"in-flight mismatch {i}",
                 match=(f"mm.many.{i}",))
    healthy("several mismatches")
    fuse.barrier()
    t0 = time.monotonic()
    fuse.shutdown()
    c.true(time.monotonic() - t0 < 10, "shutdown after mismatches is prompt")
    return c.finish()


def lifecycle() -> dict:
    """Duplicate names, calls after shutdown, and a peer that shuts down while we wait."""
    import fuse
    fuse.init()
    r, n = fuse.rank(), fuse.size()
    c = Checker(r)
    ins = [rank_array("float64", (8,), k, "dup") for k in range(n)]
    if r == 0:
        h = fuse.allreduce_async(ins[r], name="dup", op=fuse.Sum)
        c.raises(ValueError, lambda: fuse.allreduce_async(ins[r], name="dup", op=fuse.Sum),
                 "the same name again while in flight", match=("dup",))
        c.raises(ValueError, lambda: fuse.allgather_async(ins[r], name="dup"),
                 "the same name for another collective while in flight", match=("dup",))
        fuse.broadcast_object("go", root_rank=0)   # the peer submits "dup" only after this
    else:
        fuse.broadcast_object(None, root_rank=0)
        h = fuse.allreduce_async(ins[r], name="dup", op=fuse.Sum)
    c.array(fuse.synchronize(h), reduce_ref(ins, "sum"), "the first 'dup' completes correctly")
    c.array(fuse.allreduce(ins[r], name="dup", op=fuse.Sum), reduce_ref(ins, "sum"),
            "the name is free again once finished")

    info = {"rank": r}
    if r == 1:
        time.sleep(0.5)
        fuse.shutdown()
        c.raises((ValueError, fuse.FuseInternalError),
                 lambda: fuse.allreduce(np.ones(3), name="late"), "allreduce after shutdown")
        c.raises((ValueError, fuse.FuseInternalError),
                 lambda: fuse.allreduce_async(np.ones(3), name="late2"),
                 "allreduce_async after shutdown")
        c.raises((ValueError, fuse.FuseInternalError), lambda: fuse.barrier(),
                 "barrier after shutdown")
        c.raises(ValueError, fuse.rank, "rank() after shutdown")
        fuse.shutdown()   # a second shutdown is harmless
        c.equal(fuse.is_initialized(), False, "is_initialized() after shutdown")
    else:
        t0 = time.monotonic()
        err = c.raises(fuse.FuseInternalError,
                       lambda: fuse.allreduce(np.ones(3), name="orphan", op=fuse.Sum),
                       "a collective the shut-down peer never joins", match=("rank 1",))
        info["elapsed"] = time.monotonic() - t0
        info["error_type"] = type(err).__name__ if err is not None else None
        info["error"] = str(err)
        c.true(info["elapsed"] < 10, "the waiting rank raises promptly",
               f"after {info['elapsed']:.1f} s")
        c.raises((ValueError, fuse.FuseInternalError),
                 lambda: fuse.allreduce(np.ones(3), name="orphan2", op=fuse.Sum),
                 "a later collective also fails")
        t0 = time.monotonic()
        fuse.shutdown()
        c.true(time.monotonic() - t0 < 10, "shutdown is prompt after the peer left")
    info["checks"] = c.finish()
    return info


# ------------------------------------------------------------------------ tests

@pytest.mark.parametrize("np_", [2, 3])
def test_mismatch_raises_everywhere_and_job_continues(np_):
    assert_counts(run_job(mismatch_suite, np_), minimum=80)


@pytest.fixture(scope="module")
def lifecycle_results():
    return run_job(lifecycle, 2)


def test_duplicate_names_calls_after_shutdown_and_peer_shutdown(lifecycle_results):
    assert [i["rank"] for i in lifecycle_results] == [0, 1]
    assert_counts([i["checks"] for i in lifecycle_results], minimum=4)
    waiting = lifecycle_results[0]
    assert "orphan" in waiting["error"], waiting


def test_peer_shutdown_raises_shutdown_error(lifecycle_results):
    assert lifecycle_results[0]["error_type"] == "ShutdownError", lifecycle_results[0]
