"""Everything ``fuse.tensorflow`` offers (the ``horovod.tensorflow`` surface), in one
namespace."""

from __future__ import annotations

from fuse.common.surface import *  # noqa: F401,F403
from fuse.frameworks.tensorflow.bridge import XlaNotSupportedError  # noqa: F401
from fuse.frameworks.tensorflow.functions import (allgather_object,  # noqa: F401
                                                  broadcast_object, broadcast_object_fn,
                                                  broadcast_variables)
from fuse.frameworks.tensorflow.gradient_tape import DistributedGradientTape  # noqa: F401
from fuse.frameworks.tensorflow.mpi_ops import (allgather, allreduce, alltoall,  # noqa: F401
                                                barrier, broadcast, broadcast_,
                                                grouped_allgather, grouped_allreduce,
                                                grouped_reducescatter, join, local_rank_op,
                                                local_size_op, process_set_included_op,
                                                rank_op, reducescatter, size_op)
from fuse.frameworks.tensorflow.optimizer import DistributedOptimizer  # noqa: F401
from fuse.frameworks.tensorflow.sync_batch_norm import SyncBatchNormalization  # noqa: F401
from fuse.frameworks.tensorflow.tensors import Compression  # noqa: F401

__all__ = [n for n in dir() if not n.startswith("_") and n != "annotations"]
