"""Everything ``fuse.torch`` offers (the ``horovod.torch`` surface), in one namespace."""

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
from fuse.frameworks.torch.functions import (allgather_object, broadcast_object,  # noqa: F401
                                             broadcast_optimizer_state, broadcast_parameters)
from fuse.frameworks.torch.mpi_ops import (allgather, allgather_async, allreduce,  # noqa: F401
                                           allreduce_, allreduce_async, allreduce_async_,
                                           alltoall, alltoall_async, barrier, broadcast,
                                           broadcast_, broadcast_async, broadcast_async_,
                                           grouped_allgather, grouped_allgather_async,
                                           grouped_allreduce, grouped_allreduce_,
                                           grouped_allreduce_async, grouped_allreduce_async_,
                                           grouped_reducescatter, grouped_reducescatter_async,
                                           join, poll, reducescatter, reducescatter_async,
                                           sparse_allreduce_async, synchronize)
from fuse.frameworks.torch.optimizer import DistributedOptimizer  # noqa: F401
from fuse.frameworks.torch.sync_batch_norm import SyncBatchNorm  # noqa: F401
from fuse.frameworks.torch.tensors import Compression  # noqa: F401

__all__ = [n for n in dir() if not n.startswith("_") and n != "annotations"]
