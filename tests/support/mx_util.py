"""Helpers for the MXNet tests: run a worker function on real workers through fuse.run."""

from __future__ import annotations

import os
import sys

from framework_util import clean_env, run_on_workers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = sys.executable
WORKER_TIMEOUT = 150   # seconds; a hung worker dumps its stacks and exits


def job_env(extra=None) -> dict:
    return clean_env(HERE, extra, {"MXNET_CPU_WORKER_NTHREADS": "1"})


def run_job(fn, np_: int = 2, env=None, args=(), kwargs=None):
    """``fn(*args, **kwargs)`` on ``np_`` real workers; their results in rank order."""
    return run_on_workers(fn, np_, job_env(env), args, kwargs, timeout=WORKER_TIMEOUT)
