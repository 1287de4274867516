"""Helpers for the TensorFlow tests: run a worker function on 2 real workers through fuse.run
(real Gloo backend), with TensorFlow's start-up logging turned down."""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = sys.executable

WORKER_TIMEOUT = 200   # seconds; a hung worker dumps its stacks and exits


def job_env(extra=None) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("FUSE_") or k.startswith("HOROVOD_"))}
    env.update({
        "FUSE_BACKEND": "gloo",
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",        # no banner per process
        "TF_ENABLE_ONEDNN_OPTS": "0",       # deterministic CPU kernels, less start-up noise
        "TF_NUM_INTRAOP_THREADS": "1",
        "TF_NUM_INTEROP_THREADS": "2",
        "CUDA_VISIBLE_DEVICES": "",
        "KERAS_BACKEND": "tensorflow",
    })
    env["PYTHONPATH"] = os.pathsep.join([HERE] + [p for p in [env.get("PYTHONPATH")] if p])
    env.update({k: str(v) for k, v in (extra or {}).items()})
    return env


def run_job(fn, np_: int = 2, env=None, args=(), kwargs=None):
    """``fn(*args, **kwargs)`` on ``np_`` workers; their results in rank order."""
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
