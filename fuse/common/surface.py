"""The names every framework namespace shares, written once.

``horovod.torch``, ``horovod.tensorflow``, ``horovod.keras`` and ``horovod.mxnet`` each offer the
same identity queries, process-set functions, reduction ops and exception types next to their
framework-specific collectives.  Each adapter's ``api`` module star-imports this one and adds its
own names.
"""

from __future__ import annotations

from fuse.worker.lifecycle import (add_process_set, ccl_built, cross_rank, cross_size,
                                cuda_built, ddl_built, gloo_built, gloo_enabled, init,
                                is_homogeneous, is_initialized, local_rank, local_size,
                                mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rank,
                                remove_process_set, rocm_built, shutdown, size, start_timeline,
                                stop_timeline, sycl_built)
from fuse.collectives.ops import Adasum, Average, Max, Min, Product, Sum
from fuse.job.process_sets import ProcessSet, global_process_set
from fuse.worker.straggler import straggler_report
from fuse.exceptions import (FuseError, FuseInternalError, HorovodInternalError,
                             HorovodVersionMismatchError, HostsUpdatedInterrupt, MismatchError,
                             ShutdownError, StallError)

__all__ = [n for n in dir() if not n.startswith("_") and n != "annotations"]
