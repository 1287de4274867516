"""The timeline (FUSE_TIMELINE, start_timeline/stop_timeline) on real 2-rank jobs.

The file is a JSON array that is valid after every write (the writer rewrites the closing
bracket), so it is parsed with plain ``json.loads`` both while the job runs and after it ends.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest

from engine_util import Checker, assert_counts, run_job

pytestmark = pytest.mark.timeout(120)

FUSED = [f"fa.{i}" for i in range(3)]   # a grouped allreduce: one fused response


def _load(path: str, attempts: int = 20):
    """Parse the file; a read racing the writer's single pwrite may see a torn tail, so retry."""
    for i in range(attempts):
        try:
            with open(path, "rb") as f:
                return json.loads(f.read())
        except ValueError:
            if i == attempts - 1:
                raise
            time.sleep(0.05)


def _wait_for_event_naming(path: str, name: str, timeout: float = 60):
    """The file's events once one of them names tensor ``name``: the writer flushes on its own
    thread every 100 ms, so poll the file for it (a torn or not yet written file is read
    again).  After ``timeout`` the last events read, which the caller's check reports."""
    deadline = time.monotonic() + timeout
    events: list = []
    while True:
        try:
            events = _load(path, attempts=1)
        except (OSError, ValueError):
            pass
        if any(e.get("args", {}).get("name") == name for e in events) \
                or time.monotonic() > deadline:
            return events
        time.sleep(0.01)


def _by_tensor(events):
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e["name"] == "process_name" and e["pid"] != 0}
    per: dict[str, list] = {}
    for e in events:
        if e.get("ph") in ("B", "E", "X") and e["pid"] in names:
            per.setdefault(names[e["pid"]], []).append(e)
    for evs in per.values():
        evs.sort(key=lambda e: e["ts"])     # stable: same-µs events keep recording order
    return per


def _phases(evs):
    return [(e["ph"], e["name"]) for e in evs if e["ph"] != "X"]


# ------------------------------------------------------------------------ worker side

def _env_timeline_job(path: str):
    import fuse
    fuse.init()
    r = fuse.rank()
    c = Checker(r)
    big = [np.full(10000, r + i, np.float32) for i in range(len(FUSED))]
    outs = fuse.grouped_allreduce(big, name="fa", op=fuse.Sum)
    for i, o in enumerate(outs):
        c.array(o, np.full(10000, 2 * i + 1, np.float32), f"fused allreduce {i}")
    fuse.broadcast(np.arange(5, dtype=np.int32), 0, name="bc")
    fuse.allgather(np.ones((2, 3), np.float64), name="ag")
    large = fuse.allreduce(np.full(100_000, r + 1.0, np.float32), name="large", op=fuse.Sum)
    c.array(large, np.full(100_000, 3.0, np.float32), "allreduce through shared memory")
    if r == 0:                            # mid-run: the file is already valid JSON
        events = _wait_for_event_naming(path, "fa.0")
        c.true(any(e.get("args", {}).get("name") == "fa.0" for e in events),
               "mid-run file names fa.0", str(events[:5]))
    fuse.barrier()
    from fuse.worker import lifecycle
    backend = lifecycle.backend_name()
    fuse.shutdown()
    return {"checks": c.finish(), "backend": backend}


def _dynamic_job(tmpdir: str):
    import fuse
    fuse.init()
    r = fuse.rank()
    c = Checker(r)
    mine = os.path.join(tmpdir, f"dyn.{r}.json")
    fuse.allreduce(np.ones(4, np.float32), name="before.start")
    fuse.start_timeline(mine)             # rank 1: a no-op that returns normally
    fuse.barrier()                        # rank 1 negotiates nothing before rank 0 started
    for step in range(3):
        fuse.allreduce(np.ones(4, np.float32), name="during.inline")
    fuse.stop_timeline()
    fuse.stop_timeline()                  # idempotent
    # rank 1 must not submit "after.stop" before rank 0 has stopped (the coordinator would
    # record its negotiation): wait for rank 0's word outside the engine, so no event is added
    stopped = os.path.join(tmpdir, "stopped")
    if r == 0:
        open(stopped, "w").close()
    else:
        deadline = time.monotonic() + 60
        while not os.path.exists(stopped) and time.monotonic() < deadline:
            time.sleep(0.01)
        c.true(os.path.exists(stopped), "rank 0 said it stopped its timeline")
    fuse.allreduce(np.ones(4, np.float32), name="after.stop")
    fuse.barrier()
    c.true(not os.path.exists(os.path.join(tmpdir, "dyn.1.json")), "rank 1 wrote nothing")
    fuse.shutdown()
    return c.finish()


# ------------------------------------------------------------------------ tests

def test_env_timeline_phases(tmp_path):
    path = str(tmp_path / "timeline.json")
    out = run_job(_env_timeline_job, 2, args=(path,),
                  env={"FUSE_TIMELINE": path, "FUSE_TIMELINE_MARK_CYCLES": "1",
                       "FUSE_INLINE_THRESHOLD": "0",
                       # the fused 40 KB tensors go to the backend, the 400 KB one through
                       # shared memory (by default that takes both from 16 KiB)
                       "FUSE_SHM_THRESHOLD": str(256 * 1024)})
    assert_counts([r["checks"] for r in out])
    # the backend's own phases carry its name (tests/backends/mpi runs this test on MPI too)
    backend = out[0]["backend"].upper()
    assert backend in ("GLOO", "MPI"), out
    events = _load(path)
    assert events[0]["name"] == "process_name" and "start_time_since_epoch_in_micros" in \
        events[0]["args"]
    per = _by_tensor(events)
    for name in FUSED + ["bc", "ag", "large"]:
        assert name in per, sorted(per)
    # 400 KB, both ranks on this host: reduced through shared memory, and named so
    assert ("B", "SHM_ALLREDUCE") in _phases(per["large"]), _phases(per["large"])
    assert ("B", f"{backend}_ALLREDUCE") not in _phases(per["large"]), _phases(per["large"])
    for name in FUSED:
        evs = per[name]
        ticks = sorted(e["name"] for e in evs if e["ph"] == "X")
        assert ticks == ["0", "1"], ticks
        assert all(e.get("dur") == 0 for e in evs if e["ph"] == "X")
        assert _phases(evs) == [
            ("B", "NEGOTIATE_ALLREDUCE"), ("E", "NEGOTIATE_ALLREDUCE"),
            ("B", "ALLREDUCE"), ("B", "QUEUE"), ("E", "QUEUE"),
            ("B", "MEMCPY_IN_FUSION_BUFFER"), ("E", "MEMCPY_IN_FUSION_BUFFER"),
            ("B", f"{backend}_ALLREDUCE"), ("E", f"{backend}_ALLREDUCE"),
            ("B", "MEMCPY_OUT_FUSION_BUFFER"), ("E", "MEMCPY_OUT_FUSION_BUFFER"),
            ("E", "ALLREDUCE")], _phases(evs)
        # ticks fall inside the negotiation
        b, e = evs[0]["ts"], [x for x in evs if x["name"] == "NEGOTIATE_ALLREDUCE"][1]["ts"]
        assert all(b <= x["ts"] <= e for x in evs if x["ph"] == "X")
        assert evs[-1]["args"] == {"dtype": "float32", "shape": "[10000]"}
    # the fused tensors share one backend call
    starts = {e["ts"] for n in FUSED for e in per[n] if e["name"] == f"{backend}_ALLREDUCE"
              and e["ph"] == "B"}
    assert len(starts) == 1, starts
    assert _phases(per["bc"])[2:] == [("B", "BROADCAST"), ("B", "QUEUE"), ("E", "QUEUE"),
                                       ("B", f"{backend}_BROADCAST"),
                                       ("E", f"{backend}_BROADCAST"),
                                       ("E", "BROADCAST")]
    assert per["ag"][-1]["args"] == {"dtype": "float64", "shape": "[2, 3]"}
    cycles = [e for e in events if e["name"] == "CYCLE_START"]
    assert cycles and all(e["ph"] == "i" and e["s"] == "g" for e in cycles)


def test_dynamic_start_stop_inline(tmp_path):
    assert_counts(run_job(_dynamic_job, 2, args=(str(tmp_path),),
                          env={"FUSE_TIMELINE": "dynamic"}))
    assert sorted(os.listdir(tmp_path)) == ["dyn.0.json", "stopped"]
    events = _load(str(tmp_path / "dyn.0.json"))
    per = _by_tensor(events)
    assert set(per) == {"barrier", "during.inline"}, sorted(per)   # nothing before/after
    assert _phases(per["barrier"])[-2:] == [("E", "QUEUE"), ("E", "BARRIER")]
    assert not [e for e in events if e["name"] == "CYCLE_START"]
    one = [("B", "NEGOTIATE_ALLREDUCE"), ("E", "NEGOTIATE_ALLREDUCE"), ("B", "ALLREDUCE"),
           ("B", "QUEUE"), ("E", "QUEUE"), ("B", "INLINE_ALLREDUCE"), ("E", "INLINE_ALLREDUCE"),
           ("E", "ALLREDUCE")]
    assert _phases(per["during.inline"]) == one * 3
    assert sum(e["ph"] == "X" for e in per["during.inline"]) == 6


def test_no_timeline_without_env(tmp_path):
    """Without FUSE_TIMELINE nothing is written and stop_timeline is a harmless no-op."""
    assert_counts(run_job(_no_timeline_job, 2, args=(str(tmp_path),)))
    assert os.listdir(tmp_path) == []


def _no_timeline_job(tmpdir: str):
    import fuse
    fuse.init()
    c = Checker(fuse.rank())
    fuse.stop_timeline()
    c.equal(fuse.allreduce(np.ones(3), name="x", op=fuse.Sum).tolist(), [2.0] * 3, "allreduce")
    fuse.shutdown()
    return c.finish()
