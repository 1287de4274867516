"""Everything ``fuse.mxnet`` offers (the ``horovod.mxnet`` surface), in one namespace."""

from __future__ import annotations

from fuse.common.surface import *  # noqa: F401,F403
from fuse.frameworks.mxnet import elastic  # noqa: F401  (hvd.elastic, as torch's)
from fuse.frameworks.mxnet.functions import (allgather_object, broadcast_object,  # noqa: F401
                                             broadcast_parameters)
from fuse.frameworks.mxnet.mpi_ops import (allgather, allreduce, allreduce_,  # noqa: F401
                                           alltoall, broadcast, broadcast_, grouped_allgather,
                                           grouped_allreduce, grouped_allreduce_,
                                           grouped_reducescatter, reducescatter)
from fuse.frameworks.mxnet.optimizer import DistributedOptimizer, DistributedTrainer  # noqa: F401
from fuse.frameworks.mxnet.tensors import Compression  # noqa: F401

__all__ = [n for n in dir() if not n.startswith("_") and n != "annotations"]
