"""Allreduce on real workers: every dtype x op, pre/postscale, in place, async + poll/synchronize,
grouped, the response cache over many steps and fused bursts of small tensors, under each engine
configuration (fusion on/off, cache off, a 2-slot cache, inline reduction off)."""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest

from engine_util import (DTYPES, FLOAT_DTYPES, OPS, BFLOAT16, Checker, assert_counts, data_kind,
                      op_value, rank_array, reduce_ref, run_job)

pytestmark = pytest.mark.timeout(120)

SMALL = (3, 5)       # 15 elements: travels inline with the negotiation (coordinator reduces)
LARGE = (33001,)     # > 64 KiB over the set even for 1-byte dtypes: a real backend allreduce

CONFIGS = {
    "default": {},
    "nofusion": {"FUSE_FUSION_THRESHOLD": 0},
    "nocache": {"FUSE_CACHE_CAPACITY": 0},
    "tinycache": {"FUSE_CACHE_CAPACITY": 2},
    # every allreduce the coordinator does not compute goes through shared memory
    "noinline": {"FUSE_INLINE_THRESHOLD": 0, "FUSE_SHM_THRESHOLD": 1},
    # every allreduce from 1 KiB up as two concurrent halves over two connections
    "split": {"FUSE_SPLIT_THRESHOLD": 1024, "FUSE_SHM_THRESHOLD": 0},
    "noinline-nofusion-nocache": {"FUSE_INLINE_THRESHOLD": 0, "FUSE_FUSION_THRESHOLD": 0,
                                  "FUSE_CACHE_CAPACITY": 0},
    "noinline-smallfusion-tinycache": {"FUSE_INLINE_THRESHOLD": 0,
                                       "FUSE_FUSION_THRESHOLD": 4096,
                                       "FUSE_CACHE_CAPACITY": 2},
}


def _scales(dtype: str):
    """(prescale, postscale) pairs that keep every dtype's result exact (or one rounding)."""
    if dtype in FLOAT_DTYPES:
        return [(0.5, 1.0), (1.0, 2.0), (0.5, 4.0)]
    return [(1.0, 2.0), (0.5, 1.0)]   # integers: truncation after the prescale is checked too


# ------------------------------------------------------------------------ worker side

def _matrix(c: Checker, r: int, n: int) -> None:
    import fuse
    for label, shape in (("small", SMALL), ("large", LARGE)):
        for dt in DTYPES:
            for op in OPS:
                tag = f"m.{label}.{dt}.{op}"
                ins = [rank_array(dt, shape, k, tag, data_kind(op)) for k in range(n)]
                mine = ins[r].copy()
                expected = reduce_ref(ins, op)
                out = fuse.allreduce(mine, name=tag, op=op_value(op))
                c.array(out, expected, tag)
                c.array(mine, ins[r], tag + " (input left unchanged)")
                x = ins[r].copy()
                ret = fuse.allreduce_(x, name=tag + ".inplace", op=op_value(op))
                c.array(x, expected, tag + " in place")
                c.true(ret is x, tag + " in place returns its argument")
                if op in ("sum", "average"):
                    for pre, post in _scales(dt):
                        stag = f"{tag}.scaled.{pre}.{post}"
                        out = fuse.allreduce(ins[r], name=stag, op=op_value(op),
                                             prescale_factor=pre, postscale_factor=post)
                        c.array(out, reduce_ref(ins, op, pre, post), stag)
        # everything at once, asynchronously: fused where the engine can, finished in any order
        pending = []
        for dt in DTYPES:
            for op in OPS:
                tag = f"a.{label}.{dt}.{op}"
                ins = [rank_array(dt, shape, k, tag, data_kind(op)) for k in range(n)]
                h = fuse.allreduce_async(ins[r], name=tag, op=op_value(op))
                x = ins[r].copy()
                h2 = fuse.allreduce_async_(x, name=tag + ".inplace", op=op_value(op))
                pending.append((tag, h, h2, x, reduce_ref(ins, op)))
        deadline = time.monotonic() + 60
        for tag, h, h2, x, expected in reversed(pending):
            while not (fuse.poll(h) and fuse.poll(h2)) and time.monotonic() < deadline:
                time.sleep(0.001)
            c.true(fuse.poll(h) and fuse.poll(h2), tag + " async: poll() turns True")
            c.array(fuse.synchronize(h), expected, tag + " async")
            fuse.synchronize(h2)
            c.array(x, expected, tag + " async in place")


def _defaults(c: Checker, r: int, n: int) -> None:
    import fuse
    ins = [rank_array("float32", (7,), k, "defaults") for k in range(n)]
    c.array(fuse.allreduce(ins[r], name="defaults.op"), reduce_ref(ins, "average"),
            "op defaults to Average")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = fuse.allreduce(ins[r], average=False, name="defaults.avg_false")
        a = fuse.allreduce(ins[r], average=True, name="defaults.avg_true")
    c.array(s, reduce_ref(ins, "sum"), "average=False is Sum")
    c.array(a, reduce_ref(ins, "average"), "average=True is Average")
    c.true(any(issubclass(w.category, DeprecationWarning) for w in caught),
           "average= warns DeprecationWarning")
    c.raises(ValueError, lambda: fuse.allreduce(ins[r], average=True, op=fuse.Sum),
             "op and average together")
    # unnamed tensors get the same automatic names on every rank
    outs = [fuse.allreduce(ins[r] * (i + 1), op=fuse.Sum) for i in range(5)]
    for i, out in enumerate(outs):
        c.array(out, reduce_ref([x * (i + 1) for x in ins], "sum"), f"unnamed allreduce {i}")
    # an empty array (0-d arrays: see test_zero_dim_arrays_keep_their_shape)
    c.array(fuse.allreduce(np.zeros((0, 3), np.float32), name="empty", op=fuse.Sum),
            np.zeros((0, 3), np.float32), "empty allreduce")
    # poll is False while a peer has not submitted yet
    fuse.barrier()
    if r == n - 1:
        time.sleep(0.5)
    h = fuse.allreduce_async(ins[r], name="late", op=fuse.Max)
    early = fuse.poll(h)
    c.true(r != 0 or not early, "poll() is False while the last rank has not submitted")
    c.array(fuse.synchronize(h), reduce_ref(ins, "max"), "late peer")
    c.equal(fuse.synchronize(h), None, "synchronize() of a finished handle returns None")


def _grouped(c: Checker, r: int, n: int) -> None:
    import fuse
    shapes = [(4,), (2, 3), LARGE, (1,), (5, 1, 2)]
    dts = ["float32", "int32", "float64", "int8", "float16"]
    for op in ("sum", "average", "max"):
        tags = [f"g.{op}.{i}" for i in range(len(shapes))]
        ins = [[rank_array(dt, s, k, t, data_kind(op)) for k in range(n)]
               for dt, s, t in zip(dts, shapes, tags)]
        expected = [reduce_ref(x, op) for x in ins]
        outs = fuse.grouped_allreduce([x[r] for x in ins], name=f"g.{op}", op=op_value(op))
        c.equal(type(outs), list, f"grouped_allreduce {op} returns a list")
        for i, (o, e) in enumerate(zip(outs, expected)):
            c.array(o, e, f"grouped_allreduce {op} [{i}]")
        xs = [x[r].copy() for x in ins]
        fuse.grouped_allreduce_(xs, name=f"g.{op}.inplace", op=op_value(op))
        for i, (o, e) in enumerate(zip(xs, expected)):
            c.array(o, e, f"grouped_allreduce_ {op} [{i}]")
        h = fuse.grouped_allreduce_async([x[r] for x in ins], name=f"g.{op}.async",
                                         op=op_value(op))
        xs = [x[r].copy() for x in ins]
        h2 = fuse.grouped_allreduce_async_(xs, name=f"g.{op}.async_", op=op_value(op))
        for i, (o, e) in enumerate(zip(fuse.synchronize(h), expected)):
            c.array(o, e, f"grouped_allreduce_async {op} [{i}]")
        fuse.synchronize(h2)
        for i, (o, e) in enumerate(zip(xs, expected)):
            c.array(o, e, f"grouped_allreduce_async_ {op} [{i}]")
    ins = [[rank_array("float32", (6,), k, f"gs.{i}") for k in range(n)] for i in range(3)]
    outs = fuse.grouped_allreduce([x[r] for x in ins], name="gs", op=fuse.Sum,
                                  prescale_factor=0.5, postscale_factor=4.0)
    for i, o in enumerate(outs):
        c.array(o, reduce_ref(ins[i], "sum", 0.5, 4.0), f"grouped scaled [{i}]")


def _steps(c: Checker, r: int, n: int, steps: int) -> None:
    """The same names over many steps (cache hits, or evictions with a tiny cache), synchronous
    and asynchronous, plus a name whose shape changes on every rank half-way."""
    import fuse
    plan = [("float32", SMALL, "sum"), ("int64", (9,), "max"), ("float64", LARGE, "average"),
            ("int16", (4, 4), "min"), ("float16", (33,), "sum"), ("uint8", LARGE, "max")]
    for step in range(steps):
        for i, (dt, shape, op) in enumerate(plan):
            ins = [rank_array(dt, shape, k, f"s.{i}.{step}", data_kind(op)) for k in range(n)]
            out = fuse.allreduce(ins[r], name=f"step.{i}", op=op_value(op))
            c.array(out, reduce_ref(ins, op), f"step {step} tensor step.{i} ({dt} {op})")
        pend = []
        for i, (dt, shape, op) in enumerate(plan):
            ins = [rank_array(dt, shape, k, f"sa.{i}.{step}", data_kind(op)) for k in range(n)]
            pend.append((i, fuse.allreduce_async(ins[r], name=f"step.async.{i}",
                                                 op=op_value(op)), reduce_ref(ins, op)))
        for i, h, e in pend[::-1]:
            c.array(fuse.synchronize(h), e, f"step {step} async step.async.{i}")
        shape = (5,) if step < steps // 2 else (2, 7)
        ins = [rank_array("int32", shape, k, f"shape.{step}") for k in range(n)]
        c.array(fuse.allreduce(ins[r], name="step.reshaped", op=fuse.Sum),
                reduce_ref(ins, "sum"), f"step {step} same name with shape {shape}")


def _burst(c: Checker, r: int, n: int, count: int) -> None:
    """Many small tensors of mixed dtypes, ops and scales submitted at once."""
    import fuse
    import random
    rnd = random.Random(7)          # same plan on every rank
    dts = ["float32", "float64", "int32", "int64", "float16", "uint8"]
    if BFLOAT16 is not None:
        dts.append("bfloat16")
    pend = []
    for i in range(count):
        dt = rnd.choice(dts)
        op = rnd.choice(["sum", "average", "sum", "max"])
        shape = (rnd.randint(1, 300),)
        pre, post = (0.5, 2.0) if (op != "max" and dt in FLOAT_DTYPES and i % 3 == 0) else (1, 1)
        ins = [rank_array(dt, shape, k, f"burst.{i}", data_kind(op)) for k in range(n)]
        h = fuse.allreduce_async(ins[r], name=f"burst.{i}", op=op_value(op),
                                 prescale_factor=pre, postscale_factor=post)
        pend.append((i, h, reduce_ref(ins, op, pre, post), dt, op))
    order = list(range(count))
    random.Random(r).shuffle(order)  # each rank waits in its own order
    for j in order:
        i, h, e, dt, op = pend[j]
        c.array(fuse.synchronize(h), e, f"burst tensor {i} ({dt} {op})")


def allreduce_suite(steps: int, burst: int) -> int:
    import fuse
    fuse.init()
    r, n = fuse.rank(), fuse.size()
    c = Checker(r)
    c.equal(n, int(__import__("os").environ["FUSE_SIZE"]), "size() matches the launcher")
    _matrix(c, r, n)
    _defaults(c, r, n)
    _grouped(c, r, n)
    _steps(c, r, n, steps)
    _burst(c, r, n, burst)
    fuse.shutdown()
    return c.finish()


# ------------------------------------------------------------------------ tests

@pytest.mark.parametrize("np_,config", [
    (2, "default"), (3, "default"), (2, "nofusion"), (3, "nofusion"), (3, "nocache"),
    (2, "tinycache"), (3, "tinycache"), (2, "noinline"), (3, "noinline"),
    (3, "noinline-nofusion-nocache"), (2, "noinline-smallfusion-tinycache"),
    (3, "noinline-smallfusion-tinycache"), (2, "split"), (3, "split"),
])
def test_allreduce_all_dtypes_ops_and_paths(np_, config):
    results = run_job(allreduce_suite, np_, CONFIGS[config], kwargs={"steps": 8, "burst": 200})
    assert_counts(results, minimum=1000)
    assert len(set(results)) == 1, f"ranks ran different numbers of checks: {results}"


def zero_dim() -> int:
    import fuse
    fuse.init()
    r, n = fuse.rank(), fuse.size()
    c = Checker(r)
    c.array(fuse.allreduce(np.array(r + 1, np.int64), name="scalar", op=fuse.Sum),
            np.array(n * (n + 1) // 2, np.int64), "0-d allreduce")
    x = np.array(float(r + 1))
    fuse.allreduce_(x, name="scalar.inplace", op=fuse.Max)
    c.array(x, np.array(float(n)), "0-d allreduce_")
    c.array(fuse.broadcast(np.array(r + 10, np.int32), 1, name="scalar.bcast"),
            np.array(11, np.int32), "0-d broadcast")
    c.raises(ValueError, lambda: fuse.allgather(np.array(1.0), name="scalar.allgather"),
             "allgather of a 0-d array (Horovod rejects scalars)")
    fuse.shutdown()
    return c.finish()


def test_zero_dim_arrays_keep_their_shape():
    assert_counts(run_job(zero_dim, 2))


def split_halves() -> dict:
    """A 4 MiB+ allreduce runs as two halves at once (FUSE_SPLIT_THRESHOLD, default 4 MiB),
    odd element count so the halves differ; the result is the same either way."""
    import fuse
    from fuse.worker import lifecycle
    fuse.init()
    r, n = fuse.rank(), fuse.size()
    c = Checker(r)
    for dt in ("float32", "float64", "int32"):
        shape = ((4 << 20) // np.dtype(dt).itemsize + 1,)
        ins = [rank_array(dt, shape, k, "split." + dt) for k in range(n)]
        for op in ("sum", "average", "max") if dt != "int32" else ("sum", "min"):
            x = ins[r].copy()
            fuse.allreduce_(x, name=f"split.{dt}.{op}", op=op_value(op))
            c.array(x, reduce_ref(ins, op), f"split allreduce {dt} {op}")
    c.finish()
    return lifecycle.engine().stats()["split"]


@pytest.mark.parametrize("threshold,expect_split", [(None, True), (0, False)])
def test_large_allreduce_splits_in_two_halves(threshold, expect_split):
    env = {"FUSE_SHM_THRESHOLD": 0}     # (same-host shared memory would take them first)
    if threshold is not None:
        env["FUSE_SPLIT_THRESHOLD"] = threshold
    splits = run_job(split_halves, 2, env)
    assert splits == ([8, 8] if expect_split else [0, 0])   # 3 + 3 + 2 allreduces


def exact_average(base, n: int):
    """The Average over n ranks of ``base * (rank + 1)`` (float32), bit for bit: the sums are
    integers below 2**24, and the average is their product with 1/n rounded to float32, by the
    one-pass float32 kernel as by the generic passes."""
    return (base * np.float32(n * (n + 1) // 2)) * np.float32(1.0 / n)


def shared_memory_average(count: int) -> dict:
    """Allreduces large enough for the same-host shared-memory path (FUSE_SHM_THRESHOLD,
    16 KiB): an Average of odd length (uneven parts, two chunks), scaled inside the
    reduction, an int64 Sum, and a burst of back-to-back calls of changing sizes (a rank that
    starts the next call must not overwrite what a slower peer still reads from the last)."""
    import fuse
    from fuse.worker import lifecycle

    fuse.init()
    try:
        r, n = fuse.rank(), fuse.size()
        base = np.arange(count, dtype=np.float32)
        out = fuse.allreduce(base * (r + 1), name="big", op=fuse.Average)
        ints = fuse.allreduce(np.arange(count, dtype=np.int64) * (r + 1), name="ints",
                              op=fuse.Sum)
        burst = True
        for i in range(40):
            m = 70001 + (i % 3) * 50000
            got = fuse.allreduce(np.full(m, r + i, np.int32), name=f"burst{i}", op=fuse.Sum)
            burst &= bool((got == n * i + n * (n - 1) // 2).all())
        return {"average": bool(np.array_equal(out, exact_average(base, n))),
                "sum": bool(np.array_equal(ints, np.arange(count) * (n * (n + 1) // 2))),
                "burst": burst, "shm": lifecycle.engine().stats()["shm"]}
    finally:
        fuse.shutdown()


@pytest.mark.parametrize("np_,threshold,used", [(2, None, 42), (3, None, 42), (2, "0", 0)])
def test_shared_memory_allreduce_on_one_host(np_, threshold, used):
    env = {} if threshold is None else {"FUSE_SHM_THRESHOLD": threshold}
    out = run_job(shared_memory_average, np_, env, args=(300001,))
    assert out == [{"average": True, "sum": True, "burst": True, "shm": used}] * np_, out


def path_by_size() -> dict:
    """Which path each size takes on one host: below FUSE_SHM_THRESHOLD small allreduces
    travel inline; from it up shared memory takes them, even those the inline threshold would
    have sent inline (20 KiB times 2 ranks is under its 64 KiB), and the sizes between the
    two old thresholds (128 KiB) no longer reach the backend's ring.  The engine's counters
    say which path ran; the results must be right on every one."""
    import fuse
    from fuse.worker import lifecycle

    fuse.init()
    try:
        r, n = fuse.rank(), fuse.size()
        engine = lifecycle.engine()
        out = {}
        for label, nbytes in (("1 KiB", 1024), ("20 KiB", 20 * 1024), ("128 KiB", 128 * 1024)):
            before = engine.stats()
            got = fuse.allreduce(np.full(nbytes // 4, r + 1, np.float32), name=label,
                                 op=fuse.Sum)
            after = engine.stats()
            out[label] = ("inline" if after["inline"] > before["inline"] else
                          "shm" if after["shm"] > before["shm"] else "backend",
                          bool((got == n * (n + 1) // 2).all()))
        return out
    finally:
        fuse.shutdown()


@pytest.mark.parametrize("env,paths", [
    ({}, ("inline", "shm", "shm")),
    # shared memory off: the inline threshold rules
    ({"FUSE_SHM_THRESHOLD": "0"}, ("inline", "inline", "backend")),
    # the inline limit below the shared-memory threshold, as with 8 ranks on a host (64 KiB /
    # 8 = 8 KiB per rank against 16 KiB): 20 KiB is too large to travel inline and goes
    # through shared memory, not the ring
    ({"FUSE_SHM_THRESHOLD": "65536", "FUSE_INLINE_THRESHOLD": "16384"},
     ("inline", "shm", "shm")),
])
def test_allreduce_path_by_size_on_one_host(env, paths):
    out = run_job(path_by_size, 2, env)
    expect = dict(zip(("1 KiB", "20 KiB", "128 KiB"), ((p, True) for p in paths)))
    assert out == [expect] * 2, out


def shared_region_allreduces(count: int) -> dict:
    """Buffers in regions every rank maps (shm.share_regions, as the torch optimizer's shared
    gradient buffer): at the same offset everywhere they are reduced straight between the
    regions; at different offsets, or outside any region, through the staging segments.
    ``count`` elements make each buffer larger than FUSE_ZERO_COPY_THRESHOLD, so the engine
    reduces it where it lies instead of in its fusion buffer."""
    import fuse
    from fuse.worker import lifecycle
    from fuse.engine import shm

    fuse.init()
    try:
        r, n = fuse.rank(), fuse.size()
        engine = lifecycle.engine()
        spare = 4096
        regions = shm.share_regions(engine, [(count + spare) * 4, (count + spare) * 8],
                                    lambda obj: fuse.allgather_object(obj, name="regions"))
        floats = np.frombuffer(regions[0], np.float32)
        ints = np.frombuffer(regions[1], np.int64)
        base = np.arange(count, dtype=np.float32)

        def direct_calls(fn):
            before = engine.stats()["shm_direct"]
            fn()
            return engine.stats()["shm_direct"] - before

        out = {}
        a = floats[spare:spare + count]
        a[:] = base * (r + 1)
        out["same offset"] = direct_calls(lambda: fuse.allreduce_(a, op=fuse.Average,
                                                                    name="same"))
        out["same ok"] = bool(np.array_equal(a, exact_average(base, n)))
        k = ints[:count]
        k[:] = np.arange(count) * (r + 1)
        out["int64"] = direct_calls(lambda: fuse.allreduce_(k, op=fuse.Sum, name="ints"))
        out["int64 ok"] = bool(np.array_equal(k, np.arange(count) * (n * (n + 1) // 2)))
        b = floats[r * 1024:r * 1024 + count]          # each rank elsewhere in its region
        b[:] = base - r
        out["other offsets"] = direct_calls(lambda: fuse.allreduce_(b, op=fuse.Sum,
                                                                      name="offsets"))
        out["other ok"] = bool(np.allclose(b, base * n - n * (n - 1) // 2, rtol=1e-6))
        c = base * (r + 1) if r == 0 else floats[spare:spare + count]
        c[:] = base * (r + 1)                          # rank 0 outside any region
        out["outside"] = direct_calls(lambda: fuse.allreduce_(c, op=fuse.Sum, name="outside"))
        out["outside ok"] = bool(np.allclose(c, base * n * (n + 1) / 2, rtol=1e-6))
        return out
    finally:
        fuse.shutdown()


@pytest.mark.parametrize("np_", [2, 3])
def test_buffers_in_shared_regions_are_reduced_between_them(np_):
    out = run_job(shared_region_allreduces, np_, args=(1_200_001,))
    assert out == [{"same offset": 1, "same ok": True, "int64": 1, "int64 ok": True,
                    "other offsets": 0, "other ok": True, "outside": 0,
                    "outside ok": True}] * np_, out


def lone_synchronous_calls() -> dict:
    """Synchronous collectives with nothing else in flight: for those the coordinator's answer
    settles (inline allreduces, a small broadcast) the waiting thread runs the engine loop
    itself (FUSE_SPIN_TIME_US); a backend allreduce and an allgather in between are left to
    the engine thread, unless the backend runs its collectives on the caller's thread (MPI),
    where they may be driven too.  Then a call rank 1 arrives 0.2 s late for: a spin shorter
    than that must fall back to sleeping and still complete.  A caller that drives
    sends its request itself, leaving the engine thread asleep (``sent_by_caller``; how often
    the engine thread still wakes depends on the machine's load: bench/suite/allreduce.py)."""
    import fuse
    from fuse.worker import lifecycle
    from fuse.job import state as job_state

    fuse.init()
    try:
        r, n = fuse.rank(), fuse.size()
        total = n * (n + 1) // 2
        small = all(float(fuse.allreduce(np.full(3, r + 1.0), name=f"small{i}",
                                         op=fuse.Sum)[1]) == total for i in range(30))
        before = lifecycle.engine().stats()["driven"]
        backend = fuse.allreduce(np.full(20000, r + 1, np.int64), name="backend", op=fuse.Sum)
        gathered = fuse.allgather(np.full((r + 1, 2), r, np.int32), name="gather")
        backend_driven = lifecycle.engine().stats()["driven"] - before
        if type(job_state.backend()).collectives_in_caller_thread:
            backend_driven = 0          # allowed, not required: a late peer ends the spin
        expect_gather = np.concatenate([np.full((k + 1, 2), k, np.int32) for k in range(n)])
        root = fuse.broadcast(np.arange(5.0) * (r + 1), root_rank=n - 1, name="bcast")
        if r == 1:
            time.sleep(0.2)
        late = fuse.allreduce(np.full(2, r + 1.0), name="late", op=fuse.Sum)
        return {"small": small, "backend": bool((backend == total).all()),
                "gather": bool(np.array_equal(gathered, expect_gather)),
                "bcast": bool(np.array_equal(root, np.arange(5.0) * n)),
                "late": late.tolist() == [total, total],
                "driven": lifecycle.engine().stats()["driven"] > 0,
                "backend driven": backend_driven,
                "sent by caller": lifecycle.engine().stats()["sent_by_caller"] > 0}
    finally:
        fuse.shutdown()


# The spin is FUSE_SPIN_TIME_US: how long a waiting thread may run the loop with nothing
# arriving before it sleeps (and, after spinning out, how it adapts: loop.pyx adapt_spin).
# Whether a short spin ever completes a call while driving depends on whether every peer runs
# within it: on a loaded machine 3 ranks on 2 cores are descheduled for longer than 20 ms, the
# budget halves to nothing and no call drives.  So the drive itself is asserted with a spin no
# peer outlasts (1 s, the most FUSE_SPIN_TIME_US may be: each small call completes while its
# caller drives; so does the late one); the short spin is run for what happens when the spin
# runs out (rank 1 arrives 0.2 s late: rank 0 sleeps and is woken) and asserts the outcomes
# only; 0 never drives.
DRIVES = {"driven": True, "sent by caller": True}
NEVER_DRIVES = {"driven": False, "sent by caller": False}


@pytest.mark.parametrize("np_,spin,drives", [(2, "1000000", DRIVES), (3, "1000000", DRIVES),
                                            (2, "20000", {}), (2, "0", NEVER_DRIVES)],
                         ids=["2-drives", "3-drives", "2-spins-out", "2-never-drives"])
def test_waiting_thread_drives_a_lone_collective(np_, spin, drives):
    # Shared memory off: on one host it would take the "backend" allreduce (and drive it)
    out = run_job(lone_synchronous_calls, np_, {"FUSE_SPIN_TIME_US": spin,
                                               "FUSE_SHM_THRESHOLD": "0"})
    ok = {"small": True, "backend": True, "gather": True, "bcast": True, "late": True,
          "backend driven": 0} | drives
    assert [{k: rank[k] for k in ok} for rank in out] == [ok] * np_, out


def burst_then_lone_calls() -> dict:
    """Rank 1 starts two asynchronous allreduces back to back (a burst), then synchronous lone
    ones.  Its first request goes out from its own thread; when it queues the second, the
    first is still pending (rank 0 submits it only after the "go" allreduce that rank 1
    queues third), so the burst is seen and the next 16 lone calls wake the engine thread
    instead; later ones are sent from the caller's thread again (unless the engine thread,
    awake for some other reason, took the request first: so of 8 later calls, at least one).
    Counts come from the engine's ``sent_by_caller``; every result is checked too."""
    import fuse
    from fuse.worker import lifecycle

    def sent():
        return lifecycle.engine().stats()["sent_by_caller"]

    fuse.init()
    try:
        r, n = fuse.rank(), fuse.size()
        total = n * (n + 1) // 2
        x = [np.full(4, r + 1.0) for _ in range(2)]
        before = sent()
        if r == 1:
            handles = [fuse.allreduce_async_(t, name=f"burst{i}", op=fuse.Sum)
                       for i, t in enumerate(x)]
            fuse.allreduce(np.zeros(1), name="go")
        else:
            fuse.allreduce(np.zeros(1), name="go")
            handles = [fuse.allreduce_async_(t, name=f"burst{i}", op=fuse.Sum)
                       for i, t in enumerate(x)]
        for h in handles:
            fuse.synchronize(h)
        after_burst = sent()
        lone = [float(fuse.allreduce(np.full(2, r + 1.0), name=f"lone{i}", op=fuse.Sum)[0])
                for i in range(16)]
        after_pause = sent()
        later = [float(fuse.allreduce(np.full(2, r + 1.0), name=f"later{i}", op=fuse.Sum)[0])
                 for i in range(8)]
        return {"results": all(float(t[0]) == total for t in x)
                and lone == [total] * 16 and later == [total] * 8,
                "burst": after_burst - before, "pause": after_pause - after_burst,
                "after": sent() - after_pause}
    finally:
        fuse.shutdown()


def test_a_burst_hands_lone_requests_to_the_engine_thread():
    # a spin no peer outlasts (see above), so that every lone call is the caller's to send
    out = run_job(burst_then_lone_calls, 2, {"FUSE_SPIN_TIME_US": "1000000"})
    assert out[1]["results"] and out[1]["pause"] == 0 and out[1]["after"] >= 1, out
    assert out[0]["results"], out


def test_bfloat16_available():
    # ml_dtypes is a test dependency (fuse-dl[test]): without it the bfloat16 cases would be left
    # out of every matrix test in silence
    assert BFLOAT16 is not None, ("ml_dtypes is not installed: the bfloat16 cases are left out "
                                  "of every matrix test (pip install 'fuse-dl[test]')")
    assert "bfloat16" in DTYPES
