"""Starting jobs on the pygloo backend with fuse's own test launchers (tests/support/engine_util.py)."""

from __future__ import annotations

import engine_util

_job_env = engine_util.job_env     # the original, before any test module swaps it


def pygloo_job_env(extra: dict | None = None) -> dict:
    """engine_util.job_env, with the workers on FUSE_BACKEND=pygloo."""
    return _job_env({**(extra or {}), "FUSE_BACKEND": "pygloo"})


def pygloo_run_job(fn, np_: int, env: dict | None = None, **kwargs):
    """engine_util.run_job, with the workers on FUSE_BACKEND=pygloo."""
    return engine_util.run_job(fn, np_, env={**(env or {}), "FUSE_BACKEND": "pygloo"}, **kwargs)
