"""Starting jobs on the pygloo backend with tests/parallel's launchers (par_util)."""

from __future__ import annotations

import par_util

_job_env = par_util.job_env     # the original, before any test module swaps it


def pygloo_job_env(extra: dict | None = None) -> dict:
    """par_util.job_env, with the workers on FUSE_BACKEND=pygloo."""
    return _job_env({**(extra or {}), "FUSE_BACKEND": "pygloo"})


def pygloo_run_job(fn, np_: int, env: dict | None = None, **kwargs):
    """par_util.run_job, with the workers on FUSE_BACKEND=pygloo."""
    return par_util.run_job(fn, np_, env={**(env or {}), "FUSE_BACKEND": "pygloo"}, **kwargs)
