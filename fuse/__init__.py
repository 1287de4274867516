"""fuse: synchronous data-parallel training with fused allreduce, a drop-in for Horovod.

This module is the NumPy API; ``fuse.torch``, ``fuse.tensorflow``, ``fuse.keras`` and
``fuse.mxnet`` offer the same on framework tensors.  Nothing is loaded or connected until
:func:`init`.
"""

__version__ = "0.1.0"

from fuse.common.basics import (add_process_set, autotune_state, ccl_built,  # noqa: F401
                                cross_rank, cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled, init,
                                is_homogeneous, is_initialized, local_rank, local_size,
                                mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rank,
                                remove_process_set, rocm_built, shutdown, size, start_timeline,
                                stop_timeline)
from fuse.common.ops import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from fuse.common.process_sets import ProcessSet, global_process_set  # noqa: F401
from fuse.exceptions import (BackendUnavailable, FuseError, FuseInternalError,  # noqa: F401
                             HorovodInternalError, HostsUpdatedInterrupt, MismatchError,
                             ShutdownError, StallError)
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
