"""Everything ``fuse.torch`` offers (the ``horovod.torch`` surface), in one namespace."""

from __future__ import annotations

from fuse.common.surface import *  # noqa: F401,F403
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
from fuse.frameworks.torch import elastic  # noqa: F401  (hvd.elastic, as in horovod.torch)
from fuse.frameworks.torch.optimizer import DistributedOptimizer  # noqa: F401
from fuse.frameworks.torch.sync_batch_norm import SyncBatchNorm  # noqa: F401
from fuse.frameworks.torch.tensors import Compression  # noqa: F401

import torch as _torch  # noqa: E402

from fuse.cluster.thread_budget import register_thread_probe as _register_thread_probe  # noqa: E402

_register_thread_probe("torch.get_num_threads()", _torch.get_num_threads)

__all__ = [n for n in dir() if not n.startswith("_") and n != "annotations"]
