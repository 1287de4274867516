"""Hierarchical allreduce (fuse/engine/hierarchy.py) on real workers that the launcher places on
two "hosts": ``localhost`` and ``127.0.0.1`` are both this machine, but the workers get the host
names, local ranks and cross ranks of a 2 x 2 job, so the world has two hosts with two ranks
each (shared memory inside each, Gloo between them over this machine's own address).

Under mpirun (tests/backends/mpi runs these again on the MPI backend) MPI says every rank is on this
host, so the workers give themselves the same layout through ``fuse.init``'s overrides."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine_util import (DTYPES, FLOAT_DTYPES, OPS, Checker, assert_counts, data_kind, op_value,
                      rank_array, reduce_ref, run_job)

pytestmark = pytest.mark.timeout(240)

TWO_BY_TWO = "localhost:2,127.0.0.1:2"
# Sizes in elements: one element per shard and fewer than the local ranks; odd, so the
# shards differ in length; several shared-memory steps per shard (1 MiB chunks) for every dtype
SIZES = (1, 3, 33001, 700_001)


def _init(hosts: tuple[int, ...] = (2, 2), **kwargs) -> None:
    """fuse.init(); under mpirun, with the identity of ``hosts[i]`` ranks on host i."""
    import os

    import fuse
    if os.environ.get("FUSE_BACKEND") == "mpi":
        from mpi4py import MPI
        rank, first = MPI.COMM_WORLD.Get_rank(), 0
        for host, n in enumerate(hosts):
            if rank < first + n:
                kwargs.update(hostname=f"host{host}", local_rank=rank - first, local_size=n,
                              cross_rank=host, cross_size=len(hosts))
                break
            first += n
    fuse.init(**kwargs)


def _hier_count() -> int:
    from fuse.worker import lifecycle
    return lifecycle.engine().stats()["hierarchical"]


def _scaled(dt: str):
    return [(0.5, 4.0)] if dt in FLOAT_DTYPES else [(1.0, 2.0)]


def _matrix() -> int:
    """Every dtype x op x size, with pre/postscale, against numpy, and allgathers; and that
    they went hierarchically."""
    import fuse
    from fuse.worker import lifecycle
    r, n = fuse.rank(), fuse.size()
    c = Checker(r)
    c.equal((fuse.local_size(), fuse.cross_size()), (2, 2), "the launcher's 2 x 2 layout")
    before = _hier_count()
    calls = 0
    for size in SIZES:
        for dt in DTYPES:
            for op in OPS:
                tag = f"h.{size}.{dt}.{op}"
                ins = [rank_array(dt, (size,), k, tag, data_kind(op)) for k in range(n)]
                c.array(fuse.allreduce(ins[r], name=tag, op=op_value(op)), reduce_ref(ins, op), tag)
                calls += 1
                if op in ("sum", "average"):
                    for pre, post in _scaled(dt):
                        stag = f"{tag}.scaled"
                        out = fuse.allreduce(ins[r], name=stag, op=op_value(op),
                                             prescale_factor=pre, postscale_factor=post)
                        c.array(out, reduce_ref(ins, op, pre, post), stag)
                        calls += 1
    # several pipeline segments (8 MiB each: Executor._reduce_hier), the last one partial
    for dt in ("float32", "float64", "int32"):
        for op, post in (("average", 2.0), ("max", 1.0)):
            tag = f"h.segments.{dt}.{op}"
            ins = [rank_array(dt, (3_000_001,), k, tag, data_kind(op)) for k in range(n)]
            out = fuse.allreduce(ins[r], name=tag, op=op_value(op), postscale_factor=post)
            c.array(out, reduce_ref(ins, op, postscale=post), tag)
            calls += 1
    c.equal(_hier_count() - before, calls, "every allreduce went hierarchically")
    # fused: many tensors of mixed sizes in one response
    tags = [f"f.{i}" for i in range(6)]
    ins = [[rank_array("float32", (1000 * i + 7,), k, t) for k in range(n)]
           for i, t in enumerate(tags)]
    handles = [fuse.allreduce_async(x[r], name=t, op=fuse.Sum) for x, t in zip(ins, tags)]
    for h, x, t in zip(handles, ins, tags):
        c.array(fuse.synchronize(h), reduce_ref(x, "sum"), t + " (fused)")
    # allgather: rows differ per rank (one rank has none), one- and several-step exchanges
    before = lifecycle.engine().stats()["hierarchical_allgathers"]
    gathers = 0
    for dt in ("float32", "int8", "float64", "bool"):
        for label, rows in (("small", lambda k: k + 1),
                            ("uneven", lambda k: 0 if k == 1 else 7 * k),
                            ("large", lambda k: 60_000 + 1000 * k)):
            tag = f"g.{label}.{dt}"
            ins = [rank_array(dt, (rows(k), 3), k, tag) for k in range(n)]
            c.array(fuse.allgather(ins[r], name=tag), np.concatenate(ins), tag)
            gathers += 1
    c.equal(lifecycle.engine().stats()["hierarchical_allgathers"] - before, gathers,
            "every allgather went hierarchically")
    # reduce-scatter: through the hierarchical allreduce, each rank keeping its rows
    before = _hier_count()
    for dt, rows in (("float32", 4 * 60_001), ("float64", 30_003)):
        tag = f"rs.{dt}"
        ins = [rank_array(dt, (rows, 2), k, tag) for k in range(n)]
        cuts = np.cumsum([0] + [rows // n + (k < rows % n) for k in range(n)])
        out = fuse.reducescatter(ins[r], name=tag, op=fuse.Average)
        c.array(out, reduce_ref(ins, "average")[cuts[r]:cuts[r + 1]], tag)
    c.equal(_hier_count() - before, 2, "the reduce-scatters went hierarchically")
    # another process set keeps the flat allreduce, and is right
    pair = fuse.add_process_set([0, 2])
    if r in (0, 2):
        before = _hier_count()
        ins = [rank_array("float64", (50_000,), k, "pset") for k in (0, 2)]
        out = fuse.allreduce(ins[r // 2], name="pset", op=fuse.Average, process_set=pair)
        c.array(out, reduce_ref(ins, "average"), "process set [0, 2]")
        c.equal(_hier_count() - before, 0, "process set [0, 2] stays flat")
    fuse.remove_process_set(pair)
    return c.finish()


def _job_matrix() -> int:
    import fuse
    _init(process_sets="dynamic")
    try:
        return _matrix()
    finally:
        fuse.shutdown()


def test_every_dtype_and_op_on_two_hosts_of_two():
    # forced on, inline off: every allreduce and allgather, however small, goes hierarchically
    env = {"FUSE_HIERARCHICAL_ALLREDUCE": "1", "FUSE_HIERARCHICAL_ALLGATHER": "1",
           "FUSE_INLINE_THRESHOLD": "0"}
    assert_counts(run_job(_job_matrix, 4, env=env, hosts=TWO_BY_TWO), 100)


def _job_auto() -> dict:
    """What goes hierarchically by default: the large allreduce and allgather, not the small."""
    import fuse
    from fuse.worker import lifecycle
    _init()
    r, n = fuse.rank(), fuse.size()
    c = Checker(r)
    counts = {}
    for label, size in (("small", 1000), ("large", 300_000)):
        ins = [rank_array("float32", (size,), k, label) for k in range(n)]
        before = _hier_count()
        c.array(fuse.allreduce(ins[r], name=label, op=fuse.Sum), reduce_ref(ins, "sum"), label)
        counts[label] = _hier_count() - before
        before = lifecycle.engine().stats()["hierarchical_allgathers"]
        c.array(fuse.allgather(ins[r], name=label + ".g"), np.concatenate(ins), label + " gather")
        counts[label + " gather"] = lifecycle.engine().stats()["hierarchical_allgathers"] - before
    c.finish()
    fuse.shutdown()
    return counts


@pytest.mark.parametrize("setting, expected", [
    # auto: from FUSE_HIERARCHICAL_THRESHOLD up (the large allgather's result is 4.8 MB, the
    # small one's 16 KB)
    (None, {"small": 0, "large": 1, "small gather": 0, "large gather": 1}),
    # Horovod's spelling, off
    ("0", {"small": 0, "large": 0, "small gather": 0, "large gather": 0}),
])
def test_automatic_choice_and_off(setting, expected, tmp_path):
    timeline = tmp_path / "timeline.json"
    env = {"FUSE_INLINE_THRESHOLD": "0", "FUSE_TIMELINE": str(timeline)}
    if setting is not None:
        env["HOROVOD_HIERARCHICAL_ALLREDUCE"] = env["HOROVOD_HIERARCHICAL_ALLGATHER"] = setting
    assert run_job(_job_auto, 4, env=env, hosts=TWO_BY_TWO) == [expected] * 4
    # the timeline names the path the large allreduce took
    spans = {(e.get("name"), e.get("ph")) for e in json.loads(timeline.read_text())
             if isinstance(e, dict)}
    assert (("HIERARCHICAL_ALLREDUCE", "B") in spans) == bool(expected["large"]), spans


def _job_uneven() -> int:
    import fuse
    _init((2, 1))
    r, n = fuse.rank(), fuse.size()
    c = Checker(r)
    ins = [rank_array("int32", (100_000,), k, "uneven") for k in range(n)]
    c.array(fuse.allreduce(ins[r], name="uneven", op=fuse.Sum), reduce_ref(ins, "sum"), "uneven")
    c.equal(_hier_count(), 0, "an uneven layout stays flat")
    fuse.shutdown()
    return c.finish()


def test_a_layout_that_does_not_fit_stays_flat(tmp_path):
    # 2 ranks on one host, 1 on the other: forced on, it says why and reduces flat
    env = {"FUSE_HIERARCHICAL_ALLREDUCE": "1", "FUSE_INLINE_THRESHOLD": "0"}
    assert_counts(run_job(_job_uneven, 3, env=env, hosts="localhost:2,127.0.0.1:1"))
