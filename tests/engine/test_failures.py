"""A rank that fails must not hang the others: an uncaught exception, a SIGKILL (in negotiation or
inside a large backend collective, on a worker or on the coordinator rank 0), a stall (warning,
then shutdown).  Jobs run under ``fuserun`` when the launcher's exit code or a worker's stderr
matters; survivors ignore the launcher's SIGTERM and record what they saw in a JSON file, so
the engine's own behaviour is checked, not the launcher's clean-up."""

from __future__ import annotations

import json
import re
import time

import pytest

from engine_util import rank_lines, run_job, run_script

pytestmark = pytest.mark.timeout(120)

PROMPT = 10.0   # seconds within which a waiting rank must raise

SCRIPT = r"""
import json, os, signal, sys, time
import numpy as np
import fuse

out_dir, mode, victim, token = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the launcher's SIGKILL still ends us after 5 s
fuse.init()
r, n = fuse.rank(), fuse.size()
big = np.ones(8_000_000, np.float64)           # 64 MB: a real, slow-ish backend allreduce
fuse.barrier()
if r == victim:
    if mode == "raise":
        time.sleep(0.5)
        raise RuntimeError(f"{token} raised on purpose by rank {r}")
    if mode == "kill":
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "kill-inside":
        fuse.allreduce_async(big, name="pending.0", op=fuse.Sum)
        time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)
t0 = time.monotonic()
result = {"error": None, "completed": 0}
try:
    if mode == "kill-inside":
        for i in range(3):   # the victim only ever submits pending.0
            fuse.allreduce(big, name=f"pending.{i}", op=fuse.Sum)
            result["completed"] += 1
    else:
        fuse.allreduce(np.ones(3), name="pending", op=fuse.Sum)
except BaseException as e:
    result["error"] = str(e)
    result["types"] = [k.__name__ for k in type(e).__mro__]
from fuse.job.state import job
result["failed_by"] = job.engine.failed_by   # who the engine holds to blame, as data
result["elapsed"] = time.monotonic() - t0
with open(os.path.join(out_dir, f"rank{r}.json"), "w") as f:
    json.dump(result, f)
"""


def _survivor_reports(tmp_path, np_, victim):
    reports = {}
    for r in range(np_):
        if r == victim:
            continue
        path = tmp_path / f"rank{r}.json"
        assert path.exists(), f"rank {r} wrote no report: it hung or died"
        reports[r] = json.loads(path.read_text())
    return reports


def _check_survivors(reports, victim, must_mention=()):
    for r, rep in reports.items():
        assert rep["error"] is not None, f"rank {r}'s collective completed: {rep}"
        assert "FuseInternalError" in rep["types"], f"rank {r}: {rep}"
        assert rep["elapsed"] < PROMPT, f"rank {r} raised only after {rep['elapsed']:.1f} s"
        assert f"rank {victim}" in rep["error"], f"rank {r}'s error does not name rank " \
                                                 f"{victim}: {rep['error']!r}"
        for text in must_mention:
            assert text in rep["error"], f"rank {r}'s error lacks {text!r}: {rep['error']!r}"


@pytest.fixture(scope="module")
def uncaught(tmp_path_factory):
    """Rank 1 of 3 raises while ranks 0 (the coordinator) and 2 wait in an allreduce."""
    tmp_path = tmp_path_factory.mktemp("uncaught")
    token = f"boom-{time.time_ns()}"
    proc = run_script(tmp_path, SCRIPT, 3, args=(tmp_path, "raise", 1, token))
    return proc, _survivor_reports(tmp_path, 3, victim=1), token


def test_uncaught_exception_reaches_the_waiting_ranks(uncaught):
    proc, reports, token = uncaught
    assert proc.returncode != 0, proc.stderr[-3000:]
    assert re.search(r"fuserun: rank 1\b.*failed first", proc.stderr), proc.stderr[-3000:]
    assert token in proc.stderr, "the launcher does not show the failing rank's error"
    _check_survivors(reports, 1)
    assert token in reports[0]["error"], reports[0]   # the coordinator has the whole message


def test_uncaught_exception_message_reaches_every_rank(uncaught):
    _proc, reports, token = uncaught
    _check_survivors(reports, 1, must_mention=(token,))


def test_the_engines_name_the_failed_rank_as_data(uncaught):
    """The launcher blames the rank that failed first by whether each rank's error is its own
    or a consequence: the engine carries the reporting rank beside its message."""
    _proc, reports, _token = uncaught
    assert {r: rep["failed_by"] for r, rep in reports.items()} == {0: 1, 2: 1}


@pytest.mark.parametrize("mode,victim,env", [
    ("kill", 1, {}), ("kill", 0, {}), ("kill-inside", 1, {"FUSE_SHM_THRESHOLD": "0"}),
    ("kill-inside", 1, {})],
    ids=["worker-in-negotiation", "coordinator-in-negotiation",
         "worker-inside-backend-allreduce", "worker-inside-shared-memory-allreduce"])
def test_sigkill_does_not_hang_the_others(tmp_path, mode, victim, env):
    proc = run_script(tmp_path, SCRIPT, 3, env, args=(tmp_path, mode, victim, "-"))
    assert proc.returncode != 0, proc.stderr[-3000:]
    assert re.search(rf"fuserun: rank {victim}\b.*failed first", proc.stderr), \
        proc.stderr[-3000:]
    assert "SIGKILL" in proc.stderr, proc.stderr[-3000:]
    reports = _survivor_reports(tmp_path, 3, victim)
    if mode == "kill-inside":
        # the rank inside the ring may learn of the death from the backend or from the control
        # channel; either way it raises promptly, with a FuseInternalError
        for r, rep in reports.items():
            assert rep["error"] is not None and rep["completed"] < 3, f"rank {r}: {rep}"
            assert "FuseInternalError" in rep["types"], f"rank {r}: {rep}"
            assert rep["elapsed"] < PROMPT, f"rank {r} raised only after {rep['elapsed']:.1f} s"
    else:
        _check_survivors(reports, victim)


STALL_SCRIPT = r"""
import time
import numpy as np
import fuse

fuse.init()
r = fuse.rank()
fuse.barrier()
if r == 1:
    time.sleep(3)
out = fuse.allreduce(np.full(4, r + 1.0), name="stalled.tensor", op=fuse.Sum)
assert out.tolist() == [3.0] * 4, out
print("RESULT-OK", flush=True)
fuse.shutdown()
"""


def test_stall_warning_names_missing_rank_and_tensor(tmp_path):
    proc = run_script(tmp_path, STALL_SCRIPT, 2, env={"FUSE_STALL_CHECK_TIME_SECONDS": 1})
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in (0, 1):
        assert "RESULT-OK" in rank_lines(proc.stdout, r, "stdout"), proc.stdout
    err0 = rank_lines(proc.stderr, 0)
    assert any(re.search(r"rank 1\b.*stalled\.tensor", line) for line in err0), \
        "rank 0's stderr has no stall warning naming rank 1 and the tensor:\n" + "\n".join(err0)
    # the warning is about the late rank, never about rank 0 itself
    assert not any(re.search(r"rank 0\b.*stalled\.tensor", line) for line in err0), err0


def stall_shutdown() -> dict:
    import fuse
    import numpy as np
    fuse.init()
    r = fuse.rank()
    fuse.barrier()
    name = "stall.a" if r == 0 else "stall.b"   # each waits for a tensor the other never sends
    t0 = time.monotonic()
    try:
        fuse.allreduce(np.ones(4), name=name, op=fuse.Sum)
        info = {"error": None}
    except Exception as e:  # noqa: BLE001 - reported to the test
        info = {"error": str(e), "types": [k.__name__ for k in type(e).__mro__]}
    info["elapsed"] = time.monotonic() - t0
    t0 = time.monotonic()
    fuse.shutdown()
    info["shutdown"] = time.monotonic() - t0
    return info


@pytest.fixture(scope="module")
def stalled():
    return run_job(stall_shutdown, 2, {"FUSE_STALL_CHECK_TIME_SECONDS": 1,
                                       "FUSE_STALL_SHUTDOWN_TIME_SECONDS": 2})


def test_stall_shutdown_raises_stall_error(stalled):
    for r, info in enumerate(stalled):
        assert info["error"] is not None, f"rank {r}'s stalled allreduce completed: {info}"
        assert "FuseInternalError" in info["types"], f"rank {r}: {info}"
        assert 1.5 <= info["elapsed"] < 15, f"rank {r} raised after {info['elapsed']:.1f} s"
        assert info["shutdown"] < 10, f"rank {r}: shutdown took {info['shutdown']:.1f} s"
    zero = stalled[0]
    assert "StallError" in zero["types"], zero
    assert re.search(r"rank 1\b.*stall\.a", zero["error"], re.S), zero["error"]
    assert re.search(r"rank 0\b.*stall\.b", zero["error"], re.S), zero["error"]


def test_stall_shutdown_reaches_other_ranks_as_stall_error(stalled):
    one = stalled[1]
    assert "StallError" in one["types"], one
    assert re.search(r"rank 1\b.*stall\.a", one["error"], re.S), one["error"]


def raise_in_function(token: str):
    import fuse
    import numpy as np
    fuse.init()
    r = fuse.rank()
    fuse.barrier()
    if r == 1:
        time.sleep(0.5)
        raise RuntimeError(f"{token} raised on purpose by rank 1")
    t0 = time.monotonic()
    try:
        fuse.allreduce(np.ones(3), name="pending", op=fuse.Sum)
        info = {"error": None}
    except Exception as e:  # noqa: BLE001
        info = {"error": str(e), "types": [k.__name__ for k in type(e).__mro__]}
    info["elapsed"] = time.monotonic() - t0
    import os
    with open(os.path.join(os.environ["REPORT_DIR"], f"rank{r}.json"), "w") as f:
        json.dump(info, f)
    return info


def test_exception_in_fuse_run_function_reaches_the_waiting_ranks(tmp_path):
    token = f"boom-{time.time_ns()}"
    with pytest.raises(RuntimeError, match=token):
        run_job(_ignore_term_then(raise_in_function), 3, {"REPORT_DIR": tmp_path},
                args=(token,))
    reports = _survivor_reports(tmp_path, 3, victim=1)
    _check_survivors(reports, 1, must_mention=(token,))


class _ignore_term_then:
    """Run ``fn`` with SIGTERM ignored, so the survivor can report after fuse.run stops it."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args):
        import signal as _signal
        _signal.signal(_signal.SIGTERM, _signal.SIG_IGN)
        return self.fn(*args)
