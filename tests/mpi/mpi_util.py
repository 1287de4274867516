"""Starting tests/parallel jobs under mpirun (a module of its own, not conftest: every test
directory has a conftest.py, so ``from conftest import ...`` is ambiguous)."""

from __future__ import annotations


def mpi_run_job(fn, np_: int, env: dict | None = None, args=(), kwargs=None,
                timeout: int | None = None, hosts: str | None = None):
    """par_util.run_job, with the workers started by mpirun on the MPI backend.  ``hosts`` is
    not passed on: under mpirun every worker is on this host, and tests that need another
    layout give it to fuse.init themselves (tests/parallel/test_hierarchical.py)."""
    import fuse
    import par_util

    timeout = timeout or par_util.WORKER_TIMEOUT
    job_env = par_util.job_env(env)
    job_env["FUSE_BACKEND"] = "mpi"
    return fuse.run(par_util._entry, args=(fn, timeout, tuple(args), dict(kwargs or {})),
                    np=np_, env=job_env, use_mpi=True)
