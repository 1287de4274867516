"""Process sets on 3 real workers: static sets given to init(), dynamic add/remove, collectives
inside a set while the other ranks do other work (or use another set), broadcast roots given as
global ranks, membership errors."""

from __future__ import annotations

import time

import numpy as np
import pytest

from engine_util import (Checker, assert_counts, op_value, rank_array, reduce_ref, run_job,
                      split_rows)

pytestmark = pytest.mark.timeout(120)


def _set_collectives(c: Checker, ps, r: int, tag: str) -> None:
    """Every collective inside ``ps`` (this rank is a member); members' inputs only count."""
    import fuse
    from fuse.worker import lifecycle
    members = ps.ranks
    m = len(members)
    me = ps.rank()
    before = lifecycle.engine().stats()
    for dt, shape in (("float32", (6,)), ("int64", (3, 2)), ("float64", (40000,)),
                      ("uint8", (70000,))):
        for op in ("sum", "average", "max"):
            t = f"{tag}.ar.{dt}.{op}.{shape[0]}"
            ins = {k: rank_array(dt, shape, k, t, "max" if op == "max" else "sum")
                   for k in members}
            out = fuse.allreduce(ins[r], name=t, op=op_value(op), process_set=ps)
            c.array(out, reduce_ref([ins[k] for k in members], op), t)
    # allgather with different first dimensions
    ins = {k: rank_array("int32", (k + 1, 2), k, f"{tag}.ag") for k in members}
    c.array(fuse.allgather(ins[r], name=f"{tag}.ag", process_set=ps),
            np.concatenate([ins[k] for k in members]), f"{tag} allgather")
    # broadcast: the root is a global rank, even inside the set
    for root in members:
        t = f"{tag}.bc.{root}"
        ins = {k: rank_array("float64", (5, 3), k, t) for k in members}
        c.array(fuse.broadcast(ins[r], root, name=t, process_set=ps), ins[root],
                f"{tag} broadcast from global rank {root}")
        x = ins[r].copy()
        fuse.broadcast_(x, root, name=t + ".inplace", process_set=ps)
        c.array(x, ins[root], f"{tag} broadcast_ from global rank {root}")
    outsider = [k for k in range(fuse.size()) if k not in members][0]
    c.raises(ValueError, lambda: fuse.broadcast(np.zeros(3), outsider, name=f"{tag}.bc.out",
                                                process_set=ps),
             f"{tag} broadcast from a root outside the set")
    # reducescatter: blocks over the set's members, in set order
    rows = 2 * m + 1
    ins = {k: rank_array("float32", (rows, 2), k, f"{tag}.rs") for k in members}
    cuts = np.cumsum([0] + split_rows(rows, m))
    c.array(fuse.reducescatter(ins[r], name=f"{tag}.rs", op=fuse.Sum, process_set=ps),
            reduce_ref([ins[k] for k in members], "sum")[cuts[me]:cuts[me + 1]],
            f"{tag} reducescatter")
    # alltoall with splits over the set's positions
    splits = {k: [(i + j + 1) % 3 for j in range(m)] for i, k in enumerate(members)}
    ins = {k: rank_array("int16", (sum(splits[k]), 2), k, f"{tag}.a2a") for k in members}
    parts = []
    for k in members:
        start = sum(splits[k][:me])
        parts.append(ins[k][start:start + splits[k][me]])
    out, got = fuse.alltoall(ins[r], splits=splits[r], name=f"{tag}.a2a", process_set=ps)
    c.array(out, np.concatenate(parts), f"{tag} alltoall")
    c.equal([int(v) for v in got], [splits[k][me] for k in members],
            f"{tag} alltoall received splits")
    # grouped, unnamed, async, barrier
    ins = [{k: rank_array("float32", (i + 2,), k, f"{tag}.g{i}") for k in members}
           for i in range(3)]
    outs = fuse.grouped_allreduce([x[r] for x in ins], op=fuse.Sum, process_set=ps)
    for i, (o, x) in enumerate(zip(outs, ins)):
        c.array(o, reduce_ref([x[k] for k in members], "sum"), f"{tag} grouped [{i}]")
    pend = []
    for i in range(20):
        ins = {k: rank_array("float64", (i + 1,), k, f"{tag}.u{i}") for k in members}
        pend.append((fuse.allreduce_async(ins[r], op=fuse.Sum, process_set=ps),
                     reduce_ref([ins[k] for k in members], "sum"), i))
    for h, e, i in reversed(pend):
        c.array(fuse.synchronize(h), e, f"{tag} unnamed async allreduce {i}")
    fuse.barrier(process_set=ps)
    c.equal(fuse.allgather_object({"from": r}, process_set=ps),
            [{"from": k} for k in members], f"{tag} allgather_object")
    c.equal(fuse.broadcast_object(("obj", r) if r == members[-1] else None,
                                  root_rank=members[-1], process_set=ps),
            ("obj", members[-1]), f"{tag} broadcast_object")
    # every rank on this host: the set has shared-memory segments of its own, and its large
    # allreduces, reduce-scatters, allgathers and alltoalls skip the backend
    after = lifecycle.engine().stats()
    c.true(after["shm"] > before["shm"] and after["shm_gathers"] > before["shm_gathers"],
           f"{tag} collectives through the set's shared memory",
           f"the engine's shared-memory counters did not move: {before} -> {after}")


def static_sets() -> int:
    import fuse
    ps01, ps12 = fuse.ProcessSet([1, 0]), fuse.ProcessSet([2, 1])
    fuse.init(process_sets=[ps01, ps12])
    r, n = fuse.rank(), fuse.size()
    c = Checker(r)
    c.equal(ps01.ranks, [0, 1], "ProcessSet sorts its ranks")
    c.true(ps01.process_set_id not in (None, 0) and ps12.process_set_id not in (None, 0)
           and ps01.process_set_id != ps12.process_set_id, "registered sets get distinct ids",
           f"ids {ps01.process_set_id}, {ps12.process_set_id}")
    ids = fuse.allgather_object((ps01.process_set_id, ps12.process_set_id))
    c.true(len(set(ids)) == 1, "every rank has the same set ids", f"{ids}")
    c.equal((ps01.size(), ps12.size()), (2, 2), "set sizes")
    c.equal((ps01.included(), ps12.included()), (r in (0, 1), r in (1, 2)), "included()")
    if r in (0, 1):
        c.equal(ps01.rank(), r, "rank within {0,1}")
    else:
        c.raises(ValueError, ps01.rank, "rank() of a set this rank is not in")
        c.raises(ValueError, lambda: fuse.allreduce(np.ones(3), name="not.mine",
                                                    process_set=ps01),
                 "a collective on a set this rank is not in")
    c.raises(ValueError, lambda: fuse.add_process_set([0, 2]),
             "add_process_set without dynamic process sets")

    # {0,1} works while rank 2 computes on its own; then {1,2} while rank 0 computes
    if r in (0, 1):
        _set_collectives(c, ps01, r, "s01")
    else:
        a = np.random.default_rng(0).random((300, 300))
        t_end = time.monotonic() + 0.3
        while time.monotonic() < t_end:
            a = a @ a.T / np.linalg.norm(a)
    if r in (1, 2):
        _set_collectives(c, ps12, r, "s12")

    # rank 1 has collectives in flight in both sets at once; each set finishes on its own
    sets = [s for s in (ps01, ps12) if s.included()]
    pend = []
    for s in sets:
        for i in range(10):
            t = f"both.{s.ranks}.{i}"
            ins = {k: rank_array("float32", (64,), k, t) for k in s.ranks}
            pend.append((fuse.allreduce_async(ins[r], name=t, op=fuse.Sum, process_set=s),
                         reduce_ref([ins[k] for k in s.ranks], "sum"), t))
    for h, e, t in pend[::-1]:
        c.array(fuse.synchronize(h), e, t)

    # the global set still works, and the same tensor name is independent per set
    ins = [rank_array("float32", (8,), k, "global") for k in range(n)]
    c.array(fuse.allreduce(ins[r], name="shared.name", op=fuse.Sum),
            reduce_ref(ins, "sum"), "global allreduce after set traffic")
    if r in (0, 1):
        ins = {k: rank_array("float32", (8,), k, "in01") for k in (0, 1)}
        c.array(fuse.allreduce(ins[r], name="shared.name", op=fuse.Sum, process_set=ps01),
                reduce_ref([ins[0], ins[1]], "sum"), "same name in another set")
    fuse.barrier()
    fuse.shutdown()
    return c.finish()


def dynamic_sets() -> int:
    import fuse
    fuse.init(process_sets="dynamic")
    r, n = fuse.rank(), fuse.size()
    c = Checker(r)
    ps02 = fuse.add_process_set([0, 2])
    c.true(isinstance(ps02, fuse.ProcessSet) and ps02.ranks == [0, 2],
           "add_process_set returns the ProcessSet", f"{ps02}")
    solo = fuse.add_process_set(fuse.ProcessSet([1]))
    ids = fuse.allgather_object((ps02.process_set_id, solo.process_set_id))
    c.true(len(set(ids)) == 1 and ids[0][0] != ids[0][1] and 0 not in ids[0],
           "dynamic sets have distinct non-zero ids, the same on every rank", f"{ids}")
    c.raises(ValueError, lambda: fuse.add_process_set([2, 0]), "adding an existing set again")

    if r in (0, 2):
        _set_collectives(c, ps02, r, "d02")
    else:
        x = rank_array("float64", (33,), 1, "solo")
        c.array(fuse.allreduce(x, name="solo", op=fuse.Sum, process_set=solo), x,
                "allreduce in a one-rank set")
        c.array(fuse.allgather(x, name="solo.ag", process_set=solo), x,
                "allgather in a one-rank set")
        c.array(fuse.broadcast(x, 1, name="solo.bc", process_set=solo), x,
                "broadcast in a one-rank set")

    old_id = ps02.process_set_id
    c.equal(fuse.remove_process_set(ps02), True, "remove_process_set returns True")
    c.equal(ps02.process_set_id, None, "a removed set is invalidated")
    c.raises(ValueError, lambda: fuse.allreduce(np.ones(2), name="gone", process_set=ps02),
             "a collective on a removed set")
    c.equal(fuse.remove_process_set(ps02), False, "removing a removed set returns False")
    c.raises(ValueError, lambda: fuse.remove_process_set(fuse.global_process_set),
             "removing the global set")

    again = fuse.add_process_set(fuse.ProcessSet([0, 2]))
    c.true(again.process_set_id not in (None, 0), "the same ranks can be added again",
           f"{again} (old id {old_id})")
    ps12 = fuse.add_process_set([1, 2])
    if r in (0, 2):
        ins = {k: rank_array("int32", (10,), k, "again") for k in (0, 2)}
        c.array(fuse.allreduce(ins[r], name="again", op=fuse.Sum, process_set=again),
                reduce_ref([ins[0], ins[2]], "sum"), "allreduce in the re-added set")
    if r in (1, 2):
        _set_collectives(c, ps12, r, "d12")
    c.equal(fuse.remove_process_set(again), True, "remove the re-added set")
    c.equal(fuse.remove_process_set(ps12), True, "remove {1,2}")
    c.equal(fuse.remove_process_set(solo), True, "remove {1}")
    ins = [rank_array("float32", (8,), k, "dyn.global") for k in range(n)]
    c.array(fuse.allreduce(ins[r], name="dyn.global", op=fuse.Sum), reduce_ref(ins, "sum"),
            "global allreduce after removing every set")
    fuse.shutdown()
    return c.finish()


def test_static_process_sets():
    assert_counts(run_job(static_sets, 3), minimum=40)


def test_dynamic_process_sets():
    assert_counts(run_job(dynamic_sets, 3), minimum=40)


def not_held_by_requests_they_cannot_fuse_with() -> int:
    """Rank 0 submits a world allreduce that the others submit only at the end; meanwhile
    the set {0,1} allreduces and the world broadcasts.  Neither can fuse with that pending
    allreduce, so neither may wait for it: with a cycle time of a minute (FUSE_CYCLE_TIME),
    waiting would outlast the job's time limit."""
    import fuse
    ps01 = fuse.ProcessSet([0, 1])
    fuse.init(process_sets=[ps01])
    r, n = fuse.rank(), fuse.size()
    c = Checker(r)
    late = [rank_array("float32", (4,), k, "late") for k in range(n)]
    pending = fuse.allreduce_async(late[r], name="late", op=fuse.Sum) if r == 0 else None
    if r in (0, 1):
        for i in range(3):
            ins = {k: rank_array("float32", (5,), k, f"set.{i}") for k in (0, 1)}
            c.array(fuse.allreduce(ins[r], name=f"set.{i}", op=fuse.Sum, process_set=ps01),
                    reduce_ref([ins[0], ins[1]], "sum"), f"set allreduce {i}")
    for i in range(3):
        ins = [rank_array("int32", (3,), k, f"bc.{i}") for k in range(n)]
        c.array(fuse.broadcast(ins[r], 0, name=f"bc.{i}"), ins[0], f"world broadcast {i}")
    got = (fuse.synchronize(pending) if r == 0
           else fuse.allreduce(late[r], name="late", op=fuse.Sum))
    c.array(got, reduce_ref(late, "sum"), "the late allreduce")
    fuse.shutdown()
    return c.finish()


def test_collectives_are_not_held_for_requests_they_cannot_fuse_with():
    assert_counts(run_job(not_held_by_requests_they_cannot_fuse_with, 3,
                          env={"FUSE_CYCLE_TIME": "60000"}, timeout=50), minimum=4)
