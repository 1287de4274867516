"""Starting jobs on the pygloo backend with tests/parallel's launcher (par_util.run_job)."""

from __future__ import annotations

import par_util


def pygloo_run_job(fn, np_: int, env: dict | None = None, **kwargs):
    """par_util.run_job, with the workers on FUSE_BACKEND=pygloo."""
    return par_util.run_job(fn, np_, env={**(env or {}), "FUSE_BACKEND": "pygloo"}, **kwargs)
