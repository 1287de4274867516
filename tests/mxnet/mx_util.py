"""Helpers for the MXNet tests: run a worker function on real workers through fuse.run."""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = sys.executable
WORKER_TIMEOUT = 150   # seconds; a hung worker dumps its stacks and exits


def job_env(extra=None) -> dict:
    """The caller's environment without fuse/Horovod knobs, on Gloo, one thread per worker
    (four processes share two cores while the tests run)."""
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("FUSE_") or k.startswith("HOROVOD_"))}
    env["FUSE_BACKEND"] = "gloo"
    env["PYTHONUNBUFFERED"] = "1"
    env["OMP_NUM_THREADS"] = "1"
    env["MXNET_CPU_WORKER_NTHREADS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([HERE] + [p for p in [env.get("PYTHONPATH")] if p])
    env.update({k: str(v) for k, v in (extra or {}).items()})
    return env


def run_job(fn, np_: int = 2, env=None, args=(), kwargs=None):
    """``fn(*args, **kwargs)`` on ``np_`` real workers; their results in rank order."""
    import fuse
    return fuse.run(_entry, args=(fn, tuple(args), dict(kwargs or {})), np=np_,
                    env=job_env(env))


def _entry(fn, args, kwargs):
    import faulthandler
    faulthandler.dump_traceback_later(WORKER_TIMEOUT, exit=True)
    try:
        return fn(*args, **kwargs)
    finally:
        faulthandler.cancel_dump_traceback_later()
