"""Everything ``fuse.mxnet`` offers (the ``horovod.mxnet`` surface), in one namespace."""

from __future__ import annotations

from fuse.common.basics import (add_process_set, ccl_built, cross_rank, cross_size,  # noqa: F401
                                cuda_built, ddl_built, gloo_built, gloo_enabled, init,
                                is_homogeneous, is_initialized, local_rank, local_size,
                                mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rank,
                                remove_process_set, rocm_built, shutdown, size, start_timeline,
                                stop_timeline)
from fuse.common.ops import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from fuse.common.process_sets import ProcessSet, global_process_set  # noqa: F401
from fuse.exceptions import (FuseError, FuseInternalError, HorovodInternalError,  # noqa: F401
                             HorovodVersionMismatchError, HostsUpdatedInterrupt, MismatchError,
                             ShutdownError, StallError)
from fuse.frameworks.mxnet.functions import (allgather_object, broadcast_object,  # noqa: F401
                                             broadcast_parameters)
from fuse.frameworks.mxnet.mpi_ops import (allgather, allreduce, allreduce_,  # noqa: F401
                                           alltoall, broadcast, broadcast_, grouped_allgather,
                                           grouped_allreduce, grouped_allreduce_,
                                           grouped_reducescatter, reducescatter)
from fuse.frameworks.mxnet.optimizer import DistributedOptimizer, DistributedTrainer  # noqa: F401
from fuse.frameworks.mxnet.tensors import Compression  # noqa: F401

__all__ = [n for n in dir() if not n.startswith("_") and n != "annotations"]
