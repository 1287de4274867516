"""Helpers for the torch tests: run a worker function on real workers through fuse.run."""

from __future__ import annotations

import os
import sys

from framework_util import clean_env, run_on_workers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = sys.executable


def job_env(extra=None) -> dict:
    return clean_env(HERE, extra)


def run_job(fn, np_: int = 2, env=None, args=(), kwargs=None):
    """``fn(*args, **kwargs)`` on ``np_`` workers (fuse initialized, one torch thread each);
    their results in rank order."""
    return run_on_workers(fn, np_, job_env(env), args, kwargs, setup=_one_torch_thread)


def _one_torch_thread():
    import torch
    torch.set_num_threads(1)
