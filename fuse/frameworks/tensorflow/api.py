"""Everything ``fuse.tensorflow`` offers (the ``horovod.tensorflow`` surface), in one
namespace."""

from __future__ import annotations

from fuse.common.surface import *  # noqa: F401,F403
from fuse.frameworks.tensorflow.bridge import XlaNotSupportedError  # noqa: F401
from fuse.frameworks.tensorflow.functions import (allgather_object,  # noqa: F401
                                                  broadcast_global_variables,
                                                  broadcast_object, broadcast_object_fn,
                                                  broadcast_variables)
from fuse.frameworks.tensorflow import elastic  # noqa: F401  (hvd.elastic, as in Horovod)
from fuse.frameworks.tensorflow.gradient_tape import (  # noqa: F401
    DistributedGradientTape, PartialDistributedGradientTape)
from fuse.frameworks.tensorflow.mpi_ops import (allgather, allreduce, alltoall,  # noqa: F401
                                                barrier, broadcast, broadcast_,
                                                grouped_allgather, grouped_allreduce,
                                                grouped_reducescatter, join, local_rank_op,
                                                local_size_op, process_set_included_op,
                                                rank_op, reducescatter, size_op)
from fuse.frameworks.tensorflow.optimizer import DistributedOptimizer  # noqa: F401
from fuse.frameworks.tensorflow.sync_batch_norm import SyncBatchNormalization  # noqa: F401
from fuse.frameworks.tensorflow.tensors import Compression  # noqa: F401

import os as _os  # noqa: E402

import tensorflow as _tf  # noqa: E402

from fuse.cluster import thread_budget as _thread_budget  # noqa: E402


def _intra_op_threads() -> int:
    """TensorFlow's intra-op pool: the configured size, else TF_NUM_INTRAOP_THREADS, else one
    thread per usable core (0 means 'TensorFlow's default')."""
    n = _tf.config.threading.get_intra_op_parallelism_threads()
    if n > 0:
        return n
    env = _os.environ.get("TF_NUM_INTRAOP_THREADS", "")
    return int(env) if env.isdigit() and int(env) > 0 else _thread_budget.usable_cores()


_thread_budget.register_thread_probe("TensorFlow's intra-op pool", _intra_op_threads)

__all__ = [n for n in dir() if not n.startswith("_") and n != "annotations"]
