"""Horovod knobs fuse accepts but does not act on, named in one warning at ``init()``.

A Horovod script or launcher may set any of Horovod's ``HOROVOD_*`` variables; the ones fuse
implements are read by :mod:`fuse.config` (and a few by the launcher and the backends).  The
ones below are not implemented: they tune GPU/NCCL, MPI or Spark machinery fuse does not have.
A variable set to Horovod's default asks for nothing fuse lacks, so only other values are
named.  ``fuserun``'s flags for them set the ``FUSE_`` spelling, which counts too.
"""

from __future__ import annotations

import os
from typing import Mapping

# suffix after HOROVOD_/FUSE_ -> (Horovod's default, or None when any value is named;
#                                 what the knob does in Horovod)
IGNORED: dict[str, tuple[str | None, str]] = {
    "TORUS_ALLREDUCE": ("0", "2D NCCL torus allreduce"),
    "NUM_NCCL_STREAMS": ("1", "number of NCCL streams"),
    "BATCH_D2D_MEMCOPIES": ("1", "batched CUDA copies into the fusion buffer"),
    "ENABLE_ASYNC_COMPLETION": ("0", "GPU ops completing through events"),
    "DISABLE_NVTX_RANGES": ("0", "NVTX ranges"),
    "ENABLE_XLA_OPS": ("0", "the XLA allreduce kernel"),
    "ADASUM_MPI_CHUNK_SIZE": (str(1 << 30), "chunk size of MPI Adasum"),
    "CCL_CACHE": ("0", "the oneCCL op cache"),
    "SPARK_START_TIMEOUT": (None, "horovod.spark"),
    "SPARK_WORK_DIR": (None, "horovod.spark"),
    "SPARK_PYTHONPATH": (None, "horovod.spark"),
    "SPARK_USE_LOCAL_RANK_GPU_INDEX": (None, "horovod.spark"),
}


def _same(value: str, default: str) -> bool:
    try:
        return float(value) == float(default)
    except ValueError:
        return value.strip() == default


def ignored_settings(environ: Mapping[str, str] | None = None) -> list[str]:
    """``VAR=value`` for every ignored knob set (either spelling) to a non-default value."""
    env = os.environ if environ is None else environ
    found = []
    for suffix, (default, _what) in IGNORED.items():
        for var in ("FUSE_" + suffix, "HOROVOD_" + suffix):
            value = env.get(var)
            if value is not None and (default is None or not _same(value, default)):
                found.append(f"{var}={value}")
    return found


def ignored_knobs_warning(environ: Mapping[str, str] | None = None) -> str | None:
    """The warning text, or None when no ignored knob is set."""
    found = ignored_settings(environ)
    if not found:
        return None
    return ("fuse does not implement these Horovod settings and ignores them: "
            + ", ".join(found) + " (see fuse.ignored_knobs for what each does in Horovod)")


_warned = False


def warn_ignored_knobs(local_rank: int, log) -> None:
    """Once per process, on each host's first rank: log :func:`ignored_knobs_warning`."""
    global _warned
    if _warned or local_rank != 0:
        return
    _warned = True
    text = ignored_knobs_warning()
    if text:
        log.warning("%s", text)
