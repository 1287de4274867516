"""fuse: synchronous data-parallel training with fused allreduce, a drop-in for Horovod.

This module is the NumPy API; ``fuse.torch``, ``fuse.tensorflow``, ``fuse.keras`` and
``fuse.mxnet`` offer the same on framework tensors.  Nothing is loaded or connected until
:func:`init`.
"""

from fuse._build_info import VERSION as __version__  # noqa: E402  (set in meson.build)

from fuse.common.surface import *  # noqa: F401,F403
from fuse.worker.lifecycle import autotune_state  # noqa: F401
from fuse.exceptions import BackendUnavailable  # noqa: F401
from fuse._api import (allgather, allgather_async, allgather_object, allreduce,  # noqa: F401
                       allreduce_, allreduce_async, allreduce_async_, alltoall, alltoall_async,
                       barrier, broadcast, broadcast_, broadcast_async, broadcast_async_,
                       broadcast_object, grouped_allgather, grouped_allgather_async,
                       grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
                       grouped_allreduce_async_, grouped_reducescatter,
                       grouped_reducescatter_async, join, poll, reducescatter,
                       reducescatter_async, synchronize)


def run(*args, **kwargs):
    """Run a function on ``np`` workers and return their results: see
    :func:`fuse.runner.run`."""
    from fuse.runner import run as _run
    return _run(*args, **kwargs)
