"""A rank that stops answering without dying (SIGSTOP, a debugger, a hung process) must not hang
the job: the coordinator rank 0 stopped while workers wait for its responses, and a rank
stopped inside a same-host shared-memory allreduce.  The others warn after the stall-check
time and raise StallError naming the silent rank after the stall-shutdown time; the launcher
then ends the job, the stopped process included.  Real processes under ``fuserun``; survivors
ignore the launcher's SIGTERM and record what they saw, so the engine's behaviour is checked."""

from __future__ import annotations

import json
import re
import time

import pytest

from engine_util import rank_lines, run_script

pytestmark = pytest.mark.timeout(150)

WARN_S, SHUTDOWN_S = 1, 3
# the bound: the job ends within stall-shutdown time + 10 s of the stop
BOUND_S = SHUTDOWN_S + 10

SCRIPT = r"""
import json, os, signal, sys, threading, time
import numpy as np
import fuse

out_dir, mode, victim = sys.argv[1], sys.argv[2], int(sys.argv[3])
signal.signal(signal.SIGTERM, signal.SIG_IGN)   # the launcher's SIGKILL still ends us
fuse.init()
r = fuse.rank()
fuse.barrier()
result = {"error": None}
caught = None
stopped_at = os.path.join(out_dir, "stopped_at")

def stop_soon(delay):
    time.sleep(delay)
    with open(stopped_at, "w") as f:
        f.write(repr(time.time()))
    os.kill(os.getpid(), signal.SIGSTOP)

try:
    if mode == "coordinator":
        # rank 0 stops while idle; the workers' next small allreduce waits for its answer
        if r == victim:
            stop_soon(0)
        time.sleep(0.5)
        fuse.allreduce(np.ones(4), name="after.stop", op=fuse.Sum)
    else:
        # the victim stops itself while the ranks run large allreduces back to back: these
        # go through shared memory (above FUSE_SHM_THRESHOLD), where it is almost surely
        # caught inside one, with the others waiting in its barrier
        big = np.ones(16_000_000, np.float32)
        if r == victim:
            threading.Thread(target=stop_soon, args=(1.0,), daemon=True).start()
        for i in range(100000):
            fuse.allreduce(big, name=f"big.{i % 4}", op=fuse.Sum)
except BaseException as e:
    caught = e
    result["error"] = str(e)
    result["types"] = [k.__name__ for k in type(e).__mro__]
result["raised_at"] = time.time()
with open(os.path.join(out_dir, f"rank{r}.json"), "w") as f:
    json.dump(result, f)
if caught is not None:
    raise caught    # uncaught, as in a real script: reported to the launcher, which ends the job
"""

ENV = {"FUSE_STALL_CHECK_TIME_SECONDS": WARN_S, "FUSE_STALL_SHUTDOWN_TIME_SECONDS": SHUTDOWN_S}


def _run(tmp_path, mode: str, victim: int, np_: int):
    out = tmp_path / "out"
    out.mkdir()
    t0 = time.monotonic()
    proc = run_script(tmp_path, SCRIPT, np_, env=ENV, args=(out, mode, victim), timeout=120)
    elapsed = time.monotonic() - t0
    assert (out / "stopped_at").exists(), proc.stderr[-3000:]
    stopped_at = float((out / "stopped_at").read_text())
    reports = {int(p.stem[4:]): json.loads(p.read_text()) for p in out.glob("rank*.json")}
    return proc, elapsed, stopped_at, reports


def _check_survivors(proc, reports, stopped_at, victim: int, np_: int, pattern: str):
    assert proc.returncode != 0, "the job succeeded although a rank was stopped"
    assert set(reports) == set(range(np_)) - {victim}, (sorted(reports), proc.stderr[-3000:])
    for r, rep in reports.items():
        assert rep["error"] is not None, f"rank {r}'s collective completed: {rep}"
        assert rep["raised_at"] - stopped_at < BOUND_S, \
            f"rank {r} raised {rep['raised_at'] - stopped_at:.1f} s after the stop"
    # the rank that noticed first says StallError and names the stopped rank; the others may
    # hear of it through rank 0 (or, with rank 0 stopped, notice it themselves)
    stall = [rep for rep in reports.values() if "StallError" in rep["types"]]
    assert stall, reports
    assert any(re.search(pattern, rep["error"]) for rep in stall), stall


def test_a_stopped_coordinator_is_named_by_the_waiting_workers(tmp_path):
    proc, elapsed, stopped_at, reports = _run(tmp_path, "coordinator", 0, 3)
    _check_survivors(proc, reports, stopped_at, 0, 3, r"rank 0 \(host [^)]+\), the coordinator, "
                                                      r"has not answered")
    for r in (1, 2):
        # warned first, at the stall-check time, then failed at the stall-shutdown time
        warned = [line for line in rank_lines(proc.stderr, r)
                  if re.search(r"rank 0 \(host [^)]+\), the coordinator, has not answered",
                                    line) and "WARNING" in line]
        assert warned, "\n".join(rank_lines(proc.stderr, r))
        assert "StallError" in reports[r]["types"], reports[r]
    # the launcher ended the stopped rank 0 too, and blamed a stall, not a victim
    assert "StallError" in proc.stderr, proc.stderr[-3000:]


def test_a_rank_stopped_inside_a_shared_memory_allreduce_is_named(tmp_path):
    proc, elapsed, stopped_at, reports = _run(tmp_path, "shm", 1, 2)
    # rank 0 waits in the shared-memory barrier for rank 1 (or, if rank 1 stopped between two
    # allreduces, in negotiation, where the coordinator's stall inspector names it)
    _check_survivors(proc, reports, stopped_at, 1, 2,
                     r"rank 1 \(pid \d+\) has not arrived|rank 1\b.*big\.")
    warned = [line for line in rank_lines(proc.stderr, 0) if "WARNING" in line and "rank 1" in line]
    assert warned, proc.stderr[-3000:]


def test_a_stopped_coordinator_inside_a_shared_memory_allreduce_is_named(tmp_path):
    proc, elapsed, stopped_at, reports = _run(tmp_path, "shm", 0, 2)
    _check_survivors(proc, reports, stopped_at, 0, 2,
                     r"rank 0 \(pid \d+\) has not arrived|rank 0 \(host [^)]+\), the "
                     r"coordinator")
