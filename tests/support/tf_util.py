"""Helpers for the TensorFlow tests: run a worker function on 2 real workers through fuse.run
(real Gloo backend), with TensorFlow's start-up logging turned down."""

from __future__ import annotations

import os
import sys

from framework_util import assert_clean, clean_env, run_on_workers  # noqa: F401 (re-exported)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = sys.executable

WORKER_TIMEOUT = 200   # seconds; a hung worker dumps its stacks and exits

TENSORFLOW_ENV = {
    "TF_CPP_MIN_LOG_LEVEL": "2",        # no banner per process
    "TF_ENABLE_ONEDNN_OPTS": "0",       # deterministic CPU kernels, less start-up noise
    "TF_NUM_INTRAOP_THREADS": "1",
    "TF_NUM_INTEROP_THREADS": "2",
    "CUDA_VISIBLE_DEVICES": "",
    "KERAS_BACKEND": "tensorflow",
}


def job_env(extra=None) -> dict:
    return clean_env(HERE, extra, TENSORFLOW_ENV)


def run_job(fn, np_: int = 2, env=None, args=(), kwargs=None):
    """``fn(*args, **kwargs)`` on ``np_`` workers; their results in rank order."""
    return run_on_workers(fn, np_, job_env(env), args, kwargs, timeout=WORKER_TIMEOUT)
