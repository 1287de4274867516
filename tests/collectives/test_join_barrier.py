"""join() with uneven numbers of steps per rank (joined ranks contribute zeros; join returns the
last rank to join) and barrier(), on real workers."""

from __future__ import annotations

import time

import numpy as np
import pytest

from engine_util import Checker, assert_counts, op_value, rank_array, reduce_ref, run_job

pytestmark = pytest.mark.timeout(120)

CASES = [  # (label, dtype, shape, op): inline-sized and backend-sized, several ops
    ("small", "float32", (4, 3), "sum"),
    ("small", "float64", (5,), "average"),
    ("small", "int32", (6,), "max"),
    ("small", "int64", (6,), "min"),
    ("large", "float32", (33000,), "sum"),
    ("large", "float64", (20000,), "average"),
    ("large", "int16", (40000,), "max"),
]


def _expected(ins_by_rank, n, op):
    """Joined ranks contribute zero tensors; Average still divides by the full size."""
    some = next(iter(ins_by_rank.values()))
    full = [ins_by_rank.get(k, np.zeros_like(some)) for k in range(n)]
    return reduce_ref(full, op, divisor=n)


def join_and_barrier() -> int:
    import fuse
    fuse.init()
    r, n = fuse.rank(), fuse.size()
    c = Checker(r)
    # two rounds with the same tensor names (the second round runs on cached responses),
    # and the rank with the most steps rotated between rounds
    for rnd in range(2):
        steps = {k: 5 + (k + rnd) % n for k in range(n)}
        last = max(steps, key=steps.get)
        for i in range(steps[r]):
            active = [k for k in range(n) if steps[k] > i]
            for label, dt, shape, op in CASES:
                tag = f"join.{label}.{dt}.{op}.{i}"
                kind = op if op in ("min", "max") else "sum"
                ins = {k: rank_array(dt, shape, k, f"{tag}.{rnd}", kind) for k in active}
                out = fuse.allreduce(ins[r], name=tag, op=op_value(op))
                c.array(out, _expected(ins, n, op),
                        f"round {rnd} step {i} {tag} (ranks {active} active)")
            pend = []
            for j in range(4):
                tag = f"join.async.{i}.{j}"
                ins = {k: rank_array("float32", (j + 1, 5), k, f"{tag}.{rnd}") for k in active}
                pend.append((tag, fuse.allreduce_async(ins[r], name=tag, op=fuse.Sum),
                             _expected(ins, n, "sum")))
            for tag, h, e in pend[::-1]:
                c.array(fuse.synchronize(h), e, f"round {rnd} {tag} async")
        got = fuse.join()
        c.equal(got, last, f"round {rnd}: join() returns the last rank to join")

    # after the joins, everything is back to normal
    ins = [rank_array("float32", (9,), k, "after.join") for k in range(n)]
    c.array(fuse.allreduce(ins[r], name="after.join", op=fuse.Sum), reduce_ref(ins, "sum"),
            "allreduce after join")
    ins = [rank_array("int32", (k + 1,), k, "after.join.ag") for k in range(n)]
    c.array(fuse.allgather(ins[r], name="after.join.ag"), np.concatenate(ins),
            "allgather after join")

    # every rank joins without work left; the one that arrives late is reported
    time.sleep(0.4 * (r == n - 1))
    c.equal(fuse.join(), n - 1, "join() with no pending work returns the late rank")

    # barrier: nobody leaves before everybody has arrived
    for it in range(3):
        late = (it + 1) % n
        if r == late:
            time.sleep(0.4)
        enter = time.time()
        fuse.barrier()
        leave = time.time()
        times = fuse.allgather_object((enter, leave), name=f"barrier.times.{it}")
        c.true(min(t[1] for t in times) >= max(t[0] for t in times),
               f"barrier {it}: every rank left after the last (rank {late}) arrived",
               f"(enter, leave) per rank: {times}")
        c.true(leave - enter < 10, f"barrier {it} returned promptly", f"{leave - enter:.2f} s")
    fuse.shutdown()
    return c.finish()


@pytest.mark.parametrize("np_,env", [
    (2, {}), (3, {}), (3, {"FUSE_INLINE_THRESHOLD": 0, "FUSE_CACHE_CAPACITY": 2}),
    (2, {"FUSE_FUSION_THRESHOLD": 0, "FUSE_CACHE_CAPACITY": 0}),
], ids=["2-default", "3-default", "3-noinline-tinycache", "2-nofusion-nocache"])
def test_join_uneven_steps_and_barrier(np_, env):
    assert_counts(run_job(join_and_barrier, np_, env), minimum=100)
