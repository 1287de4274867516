"""What only the MPI backend does: init(comm=...), process sets from communicators, MPI error
strings, backend selection under mpirun, fuserun --mpi, and failures under mpirun."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from mpi_util import mpi_run_job, mpiexec

pytestmark = pytest.mark.timeout(120)


def _env(extra=None) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("FUSE_") or k.startswith("HOROVOD_"))}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


# ------------------------------------------------------------------ backend choice (1 process)

@pytest.mark.parametrize("environ,expected", [
    ({}, "gloo"),
    ({"PMI_SIZE": "2"}, "mpi"),
    ({"OMPI_COMM_WORLD_SIZE": "2"}, "mpi"),
    ({"OMPI_COMM_WORLD_SIZE": "2", "FUSE_RANK": "0", "FUSE_SIZE": "2"}, "gloo"),  # fuserun
    ({"PMI_SIZE": "2", "FUSE_BACKEND": "gloo"}, "gloo"),
    ({"HOROVOD_CPU_OPERATIONS": "MPI"}, "mpi"),
    ({"HOROVOD_CPU_OPERATIONS": "gloo", "PMI_SIZE": "2"}, "gloo"),
])
def test_backend_choice(environ, expected):
    from fuse.worker.lifecycle import _choose_backend
    from fuse.config import Config

    assert _choose_backend(Config.from_env(environ), environ) == expected


def test_mpi_built_and_registered():
    import fuse
    from fuse.backends import describe_backends

    assert fuse.mpi_built()
    row = [p for p in describe_backends() if p.name == "mpi"]
    assert row and row[0].loads, row


# ------------------------------------------------------------------ under mpirun

def comm_subset() -> dict:
    """init(comm=[0, 2]) on a 3-rank job: rank 1 stays out."""
    import fuse
    from mpi4py import MPI

    me = MPI.COMM_WORLD.rank
    if me == 1:
        return {"world": me, "member": False}
    fuse.init(comm=[0, 2])
    try:
        out = fuse.allreduce(np.full(70000, me + 1.0), name="x", op=fuse.Sum)
        return {"world": me, "member": True, "rank": fuse.rank(), "size": fuse.size(),
                "sum": float(out[0]), "threads": fuse.mpi_threads_supported(),
                "enabled": fuse.mpi_enabled()}
    finally:
        fuse.shutdown()


def test_init_with_a_list_of_ranks():
    out = mpi_run_job(comm_subset, 3)
    assert out[1] == {"world": 1, "member": False}
    for world, rank in ((0, 0), (2, 1)):
        assert out[world] == {"world": world, "member": True, "rank": rank, "size": 2,
                              "sum": 4.0, "threads": True, "enabled": True}, out


def comm_split() -> dict:
    """init(comm=...) with an mpi4py communicator: two independent fuse worlds, plus a process
    set made from a sub-communicator."""
    import fuse
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    half = world.Split(color=world.rank % 2, key=world.rank)
    fuse.init(comm=half)
    try:
        out = fuse.allreduce(np.full(40000, world.rank, np.int64), name="y", op=fuse.Sum)
        info = {"rank": fuse.rank(), "size": fuse.size(), "sum": int(out[0])}
    finally:
        fuse.shutdown()
    # process sets from communicators, on the whole world
    evens = world.Split(color=0 if world.rank % 2 == 0 else MPI.UNDEFINED, key=world.rank)
    if evens == MPI.COMM_NULL:
        evens = world.Create_group(world.Get_group().Incl([0, 2]))
    ps = fuse.ProcessSet(evens) if world.rank % 2 == 0 else fuse.ProcessSet([0, 2])
    fuse.init(process_sets=[ps])
    try:
        if ps.included():
            got = fuse.allreduce(np.full(40000, world.rank + 1, np.int32), name="z",
                                 op=fuse.Sum, process_set=ps)
            info["set_sum"] = int(got[0])
        info["set_ranks"] = ps.ranks
        fuse.barrier()
    finally:
        fuse.shutdown()
    return info


def test_init_with_a_communicator_and_process_sets_from_communicators():
    out = mpi_run_job(comm_split, 3)
    assert out[0] == {"rank": 0, "size": 2, "sum": 2, "set_sum": 4, "set_ranks": [0, 2]}, out
    assert out[2] == {"rank": 1, "size": 2, "sum": 2, "set_sum": 4, "set_ranks": [0, 2]}, out
    assert out[1] == {"rank": 0, "size": 1, "sum": 1, "set_ranks": [0, 2]}, out


def mpi_error_string() -> dict:
    """A failing MPI call raises MpiError carrying MPI's own error string."""
    from fuse.backends.mpi import MPIBackend, MpiError
    from fuse.config import Config
    from fuse.exceptions import BackendError

    ident = MPIBackend.job_identity()
    backend = MPIBackend(Config.from_env({}, **ident, backend="mpi"))
    try:
        backend.world.broadcast(np.zeros(8, np.uint8), root=99)
    except MpiError as err:
        return {"message": str(err), "is_backend_error": isinstance(err, BackendError),
                "code": err.code}
    finally:
        backend.close()
    return {"message": None}


def test_mpi_errors_carry_the_mpi_error_string():
    out = mpi_run_job(mpi_error_string, 2)
    for info in out:
        msg = info["message"]
        assert msg and msg.startswith("mpi: MPI_Bcast failed"), info
        assert "root" in msg.lower(), info   # MPICH: "Invalid root (value given was 99)"
        assert info["is_backend_error"] and info["code"], info


SCRIPT = """
import os, sys, time, signal
import numpy as np
import fuse
fuse.init()
r, n = fuse.rank(), fuse.size()
mode = sys.argv[1]
from fuse.worker import lifecycle
print(f"identity {r} {n} {fuse.local_rank()} {fuse.local_size()} {lifecycle.backend_name()}",
      flush=True)
x = fuse.allreduce(np.ones(100000, np.float32), name="warm", op=fuse.Sum)
assert x[0] == n
if mode == "kill" and r == 1:
    os.kill(os.getpid(), signal.SIGKILL)
if mode == "raise" and r == 1:
    raise RuntimeError("rank 1 failed on purpose")
if mode != "ok":
    fuse.allreduce(np.ones(100000, np.float32), name="never", op=fuse.Sum)
    time.sleep(600)
print("done", r, flush=True)
"""


def _script(tmp_path, mode: str, launcher: list[str], env: dict, timeout: float = 60):
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent(SCRIPT))
    t0 = time.monotonic()
    proc = subprocess.run([*launcher, sys.executable, str(path), mode], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=str(tmp_path))
    return proc, time.monotonic() - t0


@pytest.mark.parametrize("np_", [2, 3])
def test_plain_mpiexec_picks_the_mpi_backend(tmp_path, np_):
    proc, _ = _script(tmp_path, "ok", [mpiexec(), "-n", str(np_)], _env())
    assert proc.returncode == 0, proc.stderr
    # the ranks' lines can interleave on a shared stdout: find the records, not the lines
    ids = sorted(list(m) for m in re.findall(r"identity (\d+) (\d+) (\d+) (\d+) (mpi)",
                                              proc.stdout))
    assert ids == [[str(r), str(np_), str(r), str(np_), "mpi"] for r in range(np_)], proc.stdout
    assert proc.stdout.count("done") == np_


def test_fuserun_mpi(tmp_path):
    launcher = [sys.executable, "-m", "fuse.runner.launch", "--mpi", "-np", "2", "--verbose"]
    proc, _ = _script(tmp_path, "ok", launcher, _env())
    assert proc.returncode == 0, proc.stderr
    assert "fuserun: " in proc.stdout and " -np 2 " in proc.stdout, proc.stdout  # the mpirun line
    # mpirun -l labels lines itself ("[0] ..."), and may interleave them
    assert sorted(re.findall(r"identity (\d) 2 \d 2 mpi", proc.stdout)) == ["0", "1"], proc.stdout
    assert proc.stdout.count("done") == 2


@pytest.mark.parametrize("mode", ["kill", "raise"])
def test_a_dead_rank_does_not_hang_the_others(tmp_path, mode):
    proc, elapsed = _script(tmp_path, mode, [mpiexec(), "-n", "3"], _env(), timeout=90)
    assert proc.returncode != 0, (proc.stdout, proc.stderr)
    assert elapsed < 60, elapsed
    if mode == "raise":
        assert "rank 1 failed on purpose" in proc.stderr, proc.stderr


def comm_subset_process_sets() -> dict:
    """init(comm=<world ranks 1 and 2>) on 3 MPI ranks: a ProcessSet made from a communicator
    names fuse ranks (positions in fuse's world), not MPI_COMM_WORLD ranks."""
    from mpi4py import MPI

    import fuse
    world_rank = MPI.COMM_WORLD.rank
    job = MPI.COMM_WORLD.Split(1 if world_rank in (1, 2) else MPI.UNDEFINED, key=world_rank)
    if job == MPI.COMM_NULL:
        return {"member": False}
    last = job.Split(1 if world_rank == 2 else MPI.UNDEFINED, key=world_rank)
    # every rank of fuse's world registers the same set; world rank 1 is not in `last`, so it
    # names the set by its fuse rank
    single = fuse.ProcessSet(last) if last != MPI.COMM_NULL else fuse.ProcessSet([1])
    fuse.init(comm=job, process_sets=[single])
    out = {"member": True, "rank": fuse.rank(), "whole": fuse.ProcessSet(job).ranks,
           "single": single.ranks}
    if fuse.rank() == 1:
        out["sum"] = float(fuse.allreduce(np.ones(1) * 5, op=fuse.Sum, process_set=single)[0])
    fuse.barrier()
    fuse.shutdown()
    return out


def test_process_sets_from_communicators_after_init_with_a_subset():
    out = mpi_run_job(comm_subset_process_sets, 3)
    assert out[0] == {"member": False}, out
    assert out[1] == {"member": True, "rank": 0, "whole": [0, 1], "single": [1]}, out
    assert out[2] == {"member": True, "rank": 1, "whole": [0, 1], "single": [1], "sum": 5.0}, out
