"""Worker side of test_tf_compat.py: horovod.tensorflow's module layout (issue 24)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

import fuse.tensorflow as hvd


def submodules():
    """mpi_ops (basics and collectives) and compression, the same objects as fuse.tensorflow;
    util's _executing_eagerly, also as hvd._executing_eagerly (Horovod's suite imports it)."""
    from fuse.common.exceptions import HorovodInternalError
    from fuse.tensorflow import mpi_ops
    from fuse.tensorflow.compression import Compression, Compressor, FP16Compressor
    from fuse.tensorflow.util import _executing_eagerly
    mpi_ops.init()
    total = mpi_ops.allreduce(tf.ones([2]), op=mpi_ops.Sum).numpy().tolist()
    wire, ctx = Compression.fp16.compress(tf.ones([2]))
    return {
        "allreduce": total == [2.0, 2.0],
        "basics": mpi_ops.size() == 2 and mpi_ops.rank() == hvd.rank(),
        "graph_ops": mpi_ops.size_op is hvd.size_op,
        "no_optimizer": not hasattr(mpi_ops, "DistributedOptimizer"),
        "compression": (Compression is hvd.Compression and issubclass(FP16Compressor, Compressor)
                        and wire.dtype == tf.float16
                        and Compression.fp16.decompress(wire, ctx).dtype == tf.float32),
        "exceptions": HorovodInternalError is hvd.HorovodInternalError,
        "util": (hvd.util._executing_eagerly() and hvd._executing_eagerly()
                 and not tf.function(lambda: tf.constant(_executing_eagerly()))().numpy()),
    }


def elastic_state_restore_after_sync():
    """TensorFlowState: after sync(), restore() goes back to the synced (rank 0's) values and
    attributes, not to this worker's values from before the sync (Horovod's
    test_elastic_state)."""
    hvd.init()
    v = 1.0 if hvd.rank() == 0 else 2.0
    variables = [tf.Variable(np.full([2, 2], v)), tf.Variable(np.full([2], v))]
    state = hvd.elastic.TensorFlowState(variables, batch=20 + hvd.rank())
    state.sync()
    synced = [var.numpy().tolist() for var in variables]
    for var in variables:
        var.assign(tf.zeros_like(var))
    state.batch = 21
    state.restore()
    return {
        "synced": synced == [[[1.0, 1.0], [1.0, 1.0]], [1.0, 1.0]],
        "restored": [var.numpy().tolist() for var in variables] == synced,
        "batch": state.batch == 20,
    }
