"""Starting the engine's multi-process test jobs (the tests of tests/collectives, tests/engine
and tests/worker that start them with engine_util.run_job) under mpirun."""

from __future__ import annotations

import importlib.util
import os
import shutil

import needs
from paths_util import TESTS

# where those tests live: tests/backends/mpi imports their modules by name
PARALLEL_FOLDERS = [os.path.join(TESTS, name) for name in ("collectives", "engine", "worker")]


def mpiexec() -> str | None:
    """The MPI launcher on PATH (mpiexec, else mpirun), or None."""
    return shutil.which("mpiexec") or shutil.which("mpirun")


def mpi_missing() -> str:
    """Why MPI tests cannot run here ("" when they can)."""
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed"
    if not mpiexec():
        return "no mpiexec/mpirun on PATH"
    return ""


def require_mpi() -> None:
    """Skip the calling test, with the reason, when MPI is missing; fail it instead where
    FUSE_TEST_REQUIRE names mpi (tests/support/needs.py)."""
    __tracebackhide__ = True
    reason = mpi_missing()
    if reason:
        needs.missing("mpi", reason)


def mpi_run_job(fn, np_: int, env: dict | None = None, args=(), kwargs=None,
                timeout: int | None = None, hosts: str | None = None):
    """engine_util.run_job, with the workers started by mpirun on the MPI backend.  ``hosts`` is
    not passed on: under mpirun every worker is on this host, and tests that need another
    layout give it to fuse.init themselves (tests/collectives/test_hierarchical.py)."""
    import fuse
    import engine_util

    timeout = timeout or engine_util.WORKER_TIMEOUT
    job_env = engine_util.job_env(env)
    job_env["FUSE_BACKEND"] = "mpi"
    return fuse.run(engine_util._entry, args=(fn, timeout, tuple(args), dict(kwargs or {})),
                    np=np_, env=job_env, use_mpi=True)
