"""Starting the engine's multi-process test jobs (the tests of tests/collectives, tests/engine
and tests/worker that start them with engine_util.run_job) under mpirun."""

from __future__ import annotations

import os

from paths_util import TESTS

# where those tests live: tests/backends/mpi imports their modules by name
PARALLEL_FOLDERS = [os.path.join(TESTS, name) for name in ("collectives", "engine", "worker")]


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
