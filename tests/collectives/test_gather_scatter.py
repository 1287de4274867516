"""allgather, broadcast, alltoall and reducescatter (plain, grouped, async) on real workers, for
every dtype, with uneven first dimensions and splits, under several engine configurations; and
the object collectives."""

from __future__ import annotations

import os

import needs
import numpy as np
import pytest

from engine_util import (DTYPES, FLOAT_DTYPES, Checker, assert_counts, op_value, rank_array,
                      reduce_ref, run_job, split_rows)

pytestmark = pytest.mark.timeout(120)

CONFIGS = {
    "default": {},
    "nofusion": {"FUSE_FUSION_THRESHOLD": 0},
    "nocache": {"FUSE_CACHE_CAPACITY": 0},
    "tinycache": {"FUSE_CACHE_CAPACITY": 2},
    "noinline-smallfusion": {"FUSE_INLINE_THRESHOLD": 0, "FUSE_FUSION_THRESHOLD": 4096},
}

BIG_ROW = (40, 50)   # rows of 2000 elements: a few rows already exceed the inline threshold


def _rows(k: int, n: int, big: bool) -> int:
    """Rank k's first dimension for allgather: all different, one rank with none."""
    if big:
        return [3, 0, 7][k] if n == 3 else [5, 0][k]
    return 2 * k + 1


# ------------------------------------------------------------------------ worker side

def _allgather(c: Checker, r: int, n: int) -> None:
    import fuse
    for dt in DTYPES:
        for label, tail in (("small", (3,)), ("big", BIG_ROW), ("1d", ())):
            big = label == "big"
            tag = f"ag.{label}.{dt}"
            ins = [rank_array(dt, (_rows(k, n, big),) + tail, k, tag) for k in range(n)]
            expected = np.concatenate(ins)
            c.array(fuse.allgather(ins[r], name=tag), expected, tag)
        # the same name again (a cache hit), now with every rank sending the same rows
        ins = [rank_array(dt, (2, 3), k, f"ag.same.{dt}") for k in range(n)]
        c.array(fuse.allgather(ins[r], name=f"ag.small.{dt}"), np.concatenate(ins),
                f"allgather {dt} again with new first dimensions")
    # many at once, asynchronously (allgathers may be fused), and grouped
    pend = []
    for i, dt in enumerate(DTYPES * 2):
        tag = f"aga.{i}"
        ins = [rank_array(dt, (k + i % 3, 4), k, tag) for k in range(n)]
        pend.append((tag, fuse.allgather_async(ins[r], name=tag), np.concatenate(ins)))
    for tag, h, e in reversed(pend):
        c.array(fuse.synchronize(h), e, tag + " async")
    ins = [[rank_array(dt, (k + 1 + i, 2), k, f"gag.{i}") for k in range(n)]
           for i, dt in enumerate(["float32", "int64", "uint8", "float16"])]
    outs = fuse.grouped_allgather([x[r] for x in ins], name="gag")
    c.equal(len(outs), len(ins), "grouped_allgather returns one array per input")
    for i, (o, x) in enumerate(zip(outs, ins)):
        c.array(o, np.concatenate(x), f"grouped_allgather [{i}]")
    h = fuse.grouped_allgather_async([x[r] for x in ins], name="gag.async")
    for i, (o, x) in enumerate(zip(fuse.synchronize(h), ins)):
        c.array(o, np.concatenate(x), f"grouped_allgather_async [{i}]")


def _broadcast(c: Checker, r: int, n: int) -> None:
    import fuse
    for dt in DTYPES:
        for label, shape in (("small", (4, 3)), ("big", (41, 997))):
            for root in range(n):
                tag = f"bc.{label}.{dt}.{root}"
                ins = [rank_array(dt, shape, k, tag) for k in range(n)]
                mine = ins[r].copy()
                c.array(fuse.broadcast(mine, root, name=tag), ins[root], tag)
                c.array(mine, ins[r], tag + " (input left unchanged)")
                x = ins[r].copy()
                ret = fuse.broadcast_(x, root, name=tag + ".inplace")
                c.array(x, ins[root], tag + " in place")
                c.true(ret is x, tag + " in place returns its argument")
    pend = []
    for i, dt in enumerate(DTYPES):
        root = i % n
        tag = f"bca.{dt}"
        ins = [rank_array(dt, (i + 1, 3), k, tag) for k in range(n)]
        x = ins[r].copy()
        pend.append((tag, fuse.broadcast_async(ins[r], root, name=tag),
                     fuse.broadcast_async_(x, root, name=tag + ".inplace"), x, ins[root]))
    for tag, h, h2, x, e in reversed(pend):
        c.array(fuse.synchronize(h), e, tag + " async")
        fuse.synchronize(h2)
        c.array(x, e, tag + " async in place")
    # the same name many times: broadcasts are never served stale data from a cache
    for step in range(6):
        root = step % n
        ins = [rank_array("float32", (5,), k, f"bcs.{step}") for k in range(n)]
        c.array(fuse.broadcast(ins[r], root, name="bc.repeat"), ins[root],
                f"repeated broadcast step {step} root {root}")
    c.raises(ValueError, lambda: fuse.broadcast(np.zeros(2), n, name="bc.badroot"),
             "broadcast from a root outside the job")
    objs = [{"rank": k, "payload": list(range(k * 3)), "text": "x" * (k * 1000)}
            for k in range(n)]
    for root in range(n):
        got = fuse.broadcast_object(objs[r] if r == root else None, root_rank=root)
        c.equal(got, objs[root], f"broadcast_object from {root}")
    c.equal(fuse.allgather_object(objs[r]), objs, "allgather_object")
    c.equal(fuse.allgather_object(("tuple", r)), [("tuple", k) for k in range(n)],
            "allgather_object again")


def _alltoall_ref(ins, splits, r):
    parts, received = [], []
    for k, x in enumerate(ins):
        start = sum(splits[k][:r])
        parts.append(x[start:start + splits[k][r]])
        received.append(splits[k][r])
    return np.concatenate(parts), received


def _alltoall(c: Checker, r: int, n: int) -> None:
    import fuse
    for dt in DTYPES:
        for label, tail in (("small", (3,)), ("big", (2001,)), ("1d", ())):
            tag = f"a2a.even.{label}.{dt}"
            m = 2
            ins = [rank_array(dt, (n * m,) + tail, k, tag) for k in range(n)]
            expected = np.concatenate([x[r * m:(r + 1) * m] for x in ins])
            c.array(fuse.alltoall(ins[r], name=tag), expected, tag + " without splits")
            # uneven splits, some of them zero; rank k sends splits[k][j] rows to rank j
            splits = [[(k + 2 * j + 1) % 4 for j in range(n)] for k in range(n)]
            tag = f"a2a.uneven.{label}.{dt}"
            ins = [rank_array(dt, (sum(splits[k]),) + tail, k, tag) for k in range(n)]
            expected, received = _alltoall_ref(ins, splits, r)
            out, got = fuse.alltoall(ins[r], splits=splits[r], name=tag)
            c.array(out, expected, tag)
            c.array(np.asarray(got), np.array(received, np.int32), tag + " received splits")
    splits = [[k + j for j in range(n)] for k in range(n)]
    ins = [rank_array("float64", (sum(splits[k]), 2), k, "a2a.nparr") for k in range(n)]
    expected, received = _alltoall_ref(ins, splits, r)
    out, got = fuse.alltoall(ins[r], splits=np.array(splits[r], np.int32), name="a2a.nparr")
    c.array(out, expected, "alltoall with int32 array splits")
    c.equal([int(v) for v in got], received, "received splits (array splits)")
    # nothing sent at all to anyone but rank 0
    splits = [[3] + [0] * (n - 1) for _ in range(n)]
    ins = [rank_array("int32", (3, 2), k, "a2a.to0") for k in range(n)]
    expected, received = _alltoall_ref(ins, splits, r)
    out, got = fuse.alltoall(ins[r], splits=splits[r], name="a2a.to0")
    c.array(out, expected, "alltoall where only rank 0 receives")
    c.equal([int(v) for v in got], received, "received splits (only rank 0 receives)")
    pend = []
    for i in range(6):
        splits = [[(i + k * j) % 3 for j in range(n)] for k in range(n)]
        tag = f"a2a.async.{i}"
        ins = [rank_array("float32", (sum(splits[k]), 4), k, tag) for k in range(n)]
        pend.append((tag, fuse.alltoall_async(ins[r], splits=splits[r], name=tag),
                     _alltoall_ref(ins, splits, r)))
    for tag, h, (e, rec) in reversed(pend):
        out, got = fuse.synchronize(h)
        c.array(out, e, tag)
        c.equal([int(v) for v in got], rec, tag + " received splits")
    c.raises(ValueError, lambda: fuse.alltoall(np.zeros((n + 1, 2)), name="a2a.bad"),
             "alltoall without splits, first dimension not divisible")
    c.raises(ValueError, lambda: fuse.alltoall(np.zeros((4, 2)), splits=[1] * (n + 1),
                                               name="a2a.bad2"), "alltoall with too many splits")


def _reducescatter(c: Checker, r: int, n: int) -> None:
    import fuse
    for dt in DTYPES:
        for op in ("sum", "average"):
            for rows, tail in ((3 * n + 1, (3,)), (n - 1, (2,)), (20 * n + 2, (1003,)),
                               (2 * n, ())):
                for pre, post in ((1.0, 1.0), (0.5, 2.0) if dt in FLOAT_DTYPES else (1.0, 2.0)):
                    tag = f"rs.{dt}.{op}.{rows}.{pre}.{post}"
                    ins = [rank_array(dt, (rows,) + tail, k, tag) for k in range(n)]
                    full = reduce_ref(ins, op, pre, post)
                    cuts = np.cumsum([0] + split_rows(rows, n))
                    out = fuse.reducescatter(ins[r], name=tag, op=op_value(op),
                                             prescale_factor=pre, postscale_factor=post)
                    c.array(out, full[cuts[r]:cuts[r + 1]], tag)
    ins = [rank_array("float32", (7, 2), k, "rs.default") for k in range(n)]
    cuts = np.cumsum([0] + split_rows(7, n))
    c.array(fuse.reducescatter(ins[r], name="rs.default"),
            reduce_ref(ins, "average")[cuts[r]:cuts[r + 1]], "reducescatter defaults to Average")
    c.raises(ValueError, lambda: fuse.reducescatter(ins[r], op=fuse.Max, name="rs.max"),
             "reducescatter with Max")
    shapes = [(5, 2), (n,), (2 * n + 1, 3, 2)]
    dts = ["float32", "int32", "float64"]
    ins = [[rank_array(dt, s, k, f"grs.{i}") for k in range(n)]
           for i, (dt, s) in enumerate(zip(dts, shapes))]
    for op in ("sum", "average"):
        outs = fuse.grouped_reducescatter([x[r] for x in ins], name=f"grs.{op}", op=op_value(op))
        h = fuse.grouped_reducescatter_async([x[r] for x in ins], name=f"grs.async.{op}",
                                             op=op_value(op))
        outs_async = fuse.synchronize(h)
        for i, x in enumerate(ins):
            cuts = np.cumsum([0] + split_rows(x[0].shape[0], n))
            e = reduce_ref(x, op)[cuts[r]:cuts[r + 1]]
            c.array(outs[i], e, f"grouped_reducescatter {op} [{i}]")
            c.array(outs_async[i], e, f"grouped_reducescatter_async {op} [{i}]")
    pend = []
    for i in range(8):
        tag = f"rsa.{i}"
        ins = [rank_array("float32", (i + 1, 3), k, tag) for k in range(n)]
        cuts = np.cumsum([0] + split_rows(i + 1, n))
        pend.append((tag, fuse.reducescatter_async(ins[r], name=tag, op=fuse.Sum),
                     reduce_ref(ins, "sum")[cuts[r]:cuts[r + 1]]))
    for tag, h, e in reversed(pend):
        c.array(fuse.synchronize(h), e, tag + " async")


def gather_scatter_suite() -> int:
    import fuse
    from fuse.worker import lifecycle
    fuse.init()
    r, n = fuse.rank(), fuse.size()
    c = Checker(r)
    # every member on this host: allgathers, alltoalls and the broadcasts too large to travel
    # inline go through shared memory, not the backend
    for name, suite in (("allgather", _allgather), ("broadcast", _broadcast),
                        ("alltoall", _alltoall)):
        gathers = lifecycle.engine().stats()["shm_gathers"]
        suite(c, r, n)
        c.true(lifecycle.engine().stats()["shm_gathers"] > gathers,
               f"{name} through shared memory", "the engine's shared-memory counter did not move")
    before = lifecycle.engine().stats()["shm"]
    _reducescatter(c, r, n)
    # every member on this host: the reduce-scatters go through shared memory, not the backend
    c.true(lifecycle.engine().stats()["shm"] > before, "reducescatter through shared memory",
           "the engine's shared-memory counter did not move")
    fuse.shutdown()
    return c.finish()


def in_place_suite() -> int:
    """fuse's own variants that the sharded optimizer uses: a grouped allgather into given
    outputs, one of its inputs already at its rank's place in its output (gathered in place),
    and a reduce-scatter that may overwrite its input; the same results as the plain calls."""
    import fuse
    from fuse._api import ops
    from fuse.collectives import calls
    fuse.init()
    r, n = fuse.rank(), fuse.size()
    c = Checker(r)
    for dt, tail in (("float32", (3,)), ("int64", ()), ("float64", BIG_ROW)):
        tag = f"agi.{dt}"
        parts = [rank_array(dt, (k + 2,) + tail, k, tag) for k in range(n)]
        expected = np.concatenate(parts)
        at = sum(k + 2 for k in range(r))
        gathered_here = np.zeros_like(expected)
        mine = gathered_here[at:at + r + 2]
        mine[...] = parts[r]
        elsewhere = np.full_like(expected, 7)
        got = calls.synchronize(calls.grouped_allgather_async(
            ops, [mine, parts[r]], name=tag, outputs=[gathered_here, elsewhere]))
        c.true(got[0] is gathered_here and got[1] is elsewhere, f"{tag}: the outputs given",
               f"got arrays of shapes {[g.shape for g in got]}")
        c.array(gathered_here, expected, f"{tag} in place")
        c.array(elsewhere, expected, f"{tag} into an output given")
    c.raises(Exception, lambda: calls.synchronize(calls.grouped_allgather_async(
        ops, [parts[r]], name="agi.short", outputs=[np.zeros((1,) + BIG_ROW)])),
        "an output of the wrong shape", match=("agi.short", "(1, 40, 50)"))
    c.array(fuse.allgather(parts[r], name="agi.after"), expected, "an allgather after it")
    for op in ("sum", "average"):
        for rows in (2 * n, 2 * n + 1):      # even parts, and the remainder to the first
            tag = f"rs.scratch.{op}.{rows}"
            ins = [rank_array("float32", (rows, 1003), k, tag) for k in range(n)]
            cuts = np.cumsum([0] + split_rows(rows, n))
            scratch = ins[r].copy()
            out = calls.synchronize(calls.reducescatter_async(
                ops, scratch, name=tag, op=op_value(op), scratch=True))
            c.array(out, reduce_ref(ins, op)[cuts[r]:cuts[r + 1]], tag)
            c.true(not np.shares_memory(out, scratch), f"{tag}: a new array")
    fuse.shutdown()
    return c.finish()


# ------------------------------------------------------------------------ tests

@pytest.mark.parametrize("np_,config", [
    (2, "default"), (3, "default"), (3, "nofusion"), (2, "nocache"), (3, "tinycache"),
    (2, "noinline-smallfusion"),
])
def test_gather_broadcast_alltoall_reducescatter(np_, config):
    results = run_job(gather_scatter_suite, np_, CONFIGS[config])
    assert_counts(results, minimum=500)


@pytest.mark.parametrize("np_,env", [(2, {}), (3, {"FUSE_SHM_THRESHOLD": 0})],
                         ids=["shared-memory", "backend"])
def test_allgather_into_outputs_and_reducescatter_in_scratch(np_, env):
    """Through same-host shared memory, and through the backend (which must not get a send
    buffer inside its receive buffer: MPI forbids it)."""
    assert_counts(run_job(in_place_suite, np_, env), minimum=15)


def _vm_flags_at(address: int) -> list[str]:
    """The VmFlags of this process's mapping that holds ``address`` (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    return []


def large_outputs_ask_for_huge_pages() -> int:
    """A large allgather's freshly allocated output (a torch tensor: torch, unlike NumPy, asks
    for no huge pages itself) is marked for transparent huge pages (VmFlags ``hg``) before the
    collective writes it."""
    import torch

    import fuse.torch as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    c = Checker(r)
    rows = 3 << 20                      # 12 MiB of float32 per rank
    ins = [torch.full((rows,), float(k + 1)) for k in range(n)]
    out = hvd.allgather(ins[r], name="huge")
    c.true(torch.equal(out, torch.cat(ins)), "a large allgather's result")
    middle = out.data_ptr() + out.numel() * 4 // 2
    c.true("hg" in _vm_flags_at(middle), "its output asks for huge pages",
           f"VmFlags {_vm_flags_at(middle)}")
    hvd.shutdown()
    return c.finish()


@pytest.mark.skipif(not os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled"),
                    reason="this kernel has no transparent huge pages")
def test_large_outputs_ask_for_huge_pages():
    needs.module("torch")
    assert_counts(run_job(large_outputs_ask_for_huge_pages, 2), minimum=2)
