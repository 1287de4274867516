"""A rank that stops answering without dying (SIGSTOP, a debugger, a hung process) must not hang
the job: the coordinator rank 0 stopped while workers wait for its responses, and a rank
stopped inside a same-host shared-memory allreduce.  The others warn after the stall-check
time and raise StallError naming the silent rank after the stall-shutdown time; the launcher
then ends the job, the stopped process included.  Real processes under ``fuserun``; survivors
ignore the launcher's SIGTERM and record what they saw, so the engine's behaviour is checked."""

from __future__ import annotations

import json
import re

import pytest

from engine_util import rank_lines, run_script

pytestmark = pytest.mark.timeout(150)

WARN_S, SHUTDOWN_S = 1, 3

SCRIPT = r"""
import json, os, signal, sys, threading, time
import numpy as np
import fuse

out_dir, mode, victim = sys.argv[1], sys.argv[2], int(sys.argv[3])
signal.signal(signal.SIGTERM, signal.SIG_IGN)   # the launcher's SIGKILL still ends us
fuse.init()
r = fuse.rank()
pids = fuse.allgather_object(os.getpid(), name="pids")
fuse.barrier()
result = {"error": None}
caught = None
stopped = os.path.join(out_dir, "stopped")

def stop_soon(delay):
    time.sleep(delay)
    open(stopped, "w").close()
    os.kill(os.getpid(), signal.SIGSTOP)

def all_threads_stopped(pid):
    # every thread of ``pid`` in the stopped state (the field after the command's ")")
    tasks = f"/proc/{pid}/task"
    return all(open(f"{tasks}/{t}/stat").read().rpartition(")")[2].split()[0] in "Tt"
               for t in os.listdir(tasks))

big = np.ones(1 << 20, np.float32)    # 4 MiB: above FUSE_SHM_THRESHOLD, so through shared memory
try:
    if mode == "coordinator":
        # rank 0 stops while idle; the workers' next small allreduce waits for its answer
        if r == victim:
            stop_soon(0)
        fuse.allreduce(np.ones(4), name="after.stop", op=fuse.Sum)
    elif mode == "peer":
        # the victim (not rank 0) is stopped after its request for "big" reached the
        # coordinator and before the response let it start: its "sync" request, sent after
        # it on the same connection, completed the small allreduce that rank 0 waits for.
        # Rank 0 stops it, waits until it is stopped, then submits "big": rank 0 starts the
        # shared-memory allreduce and waits in it for a rank that cannot arrive.
        if r == victim:
            handle = fuse.allreduce_async(big, name="big", op=fuse.Sum)
            fuse.allreduce(np.ones(4), name="sync", op=fuse.Sum)
            fuse.synchronize(handle)
        else:
            fuse.allreduce(np.ones(4), name="sync", op=fuse.Sum)
            if r == 0:
                os.kill(pids[victim], signal.SIGSTOP)
                while not all_threads_stopped(pids[victim]):
                    time.sleep(0.001)
                open(stopped, "w").close()
            fuse.allreduce(big, name="big", op=fuse.Sum)
    else:
        # the victim stops itself while the ranks run large allreduces back to back, usually
        # inside one (with the others waiting in its barrier), else between two (the others
        # waiting in negotiation): the checks accept either
        if r == victim:
            threading.Thread(target=stop_soon, args=(1.0,), daemon=True).start()
        for i in range(100000):
            fuse.allreduce(big, name=f"big.{i % 4}", op=fuse.Sum)
except BaseException as e:
    caught = e
    result["error"] = str(e)
    result["types"] = [k.__name__ for k in type(e).__mro__]
with open(os.path.join(out_dir, f"rank{r}.json"), "w") as f:
    json.dump(result, f)
if caught is not None:
    raise caught    # uncaught, as in a real script: reported to the launcher, which ends the job
"""

ENV = {"FUSE_STALL_CHECK_TIME_SECONDS": WARN_S, "FUSE_STALL_SHUTDOWN_TIME_SECONDS": SHUTDOWN_S}


def _run(tmp_path, mode: str, victim: int, np_: int):
    out = tmp_path / "out"
    out.mkdir()
    proc = run_script(tmp_path, SCRIPT, np_, env=ENV, args=(out, mode, victim), timeout=120)
    assert (out / "stopped").exists(), proc.stderr[-3000:]
    reports = {int(p.stem[4:]): json.loads(p.read_text()) for p in out.glob("rank*.json")}
    return proc, reports


def _check_survivors(proc, reports, victim: int, np_: int, pattern: str):
    assert proc.returncode != 0, "the job succeeded although a rank was stopped"
    assert set(reports) == set(range(np_)) - {victim}, (sorted(reports), proc.stderr[-3000:])
    for r, rep in reports.items():
        assert rep["error"] is not None, f"rank {r}'s collective completed: {rep}"
    # the rank that noticed first says StallError and names the stopped rank; the others may
    # hear of it through rank 0 (or, with rank 0 stopped, notice it themselves)
    stall = [rep for rep in reports.values() if "StallError" in rep["types"]]
    assert stall, reports
    assert any(re.search(pattern, rep["error"]) for rep in stall), stall


def test_a_stopped_coordinator_is_named_by_the_waiting_workers(tmp_path):
    proc, reports = _run(tmp_path, "coordinator", 0, 3)
    _check_survivors(proc, reports, 0, 3, r"rank 0 \(host [^)]+\), the coordinator, "
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
    proc, reports = _run(tmp_path, "peer", 1, 2)
    # rank 0 waits in the shared-memory barrier for rank 1, which the barrier names
    pattern = r"shared-memory allreduce: rank 1 \(pid \d+\) has not arrived"
    _check_survivors(proc, reports, 1, 2, pattern)
    warned = [line for line in rank_lines(proc.stderr, 0)
              if "WARNING" in line and re.search(pattern, line)]
    assert warned, proc.stderr[-3000:]


def test_a_stopped_coordinator_inside_a_shared_memory_allreduce_is_named(tmp_path):
    proc, reports = _run(tmp_path, "shm", 0, 2)
    _check_survivors(proc, reports, 0, 2,
                     r"rank 0 \(pid \d+\) has not arrived|rank 0 \(host [^)]+\), the "
                     r"coordinator")
