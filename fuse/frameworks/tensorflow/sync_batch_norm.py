"""Batch normalisation with statistics computed over every worker's batch."""

from __future__ import annotations

import keras
import tensorflow as tf

from fuse.collectives.ops import Sum
from fuse.job.process_sets import global_process_set
from fuse.frameworks.tensorflow import mpi_ops


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """``keras.layers.BatchNormalization`` whose training-mode mean and variance are taken
    over the batches of all members of ``process_set`` (which may differ in size).  Only the
    moments change; moving statistics, renorm and the affine transform are Keras's own.

    The statistics travel as one differentiable allreduce (Sum) of [sum, sum of squares,
    count], so their gradients are summed over the workers as well.  ``fused=True`` is
    rejected, as in Horovod."""

    def __init__(self, fused=False, process_set=global_process_set, **kwargs):
        if fused:
            raise ValueError("SyncBatchNormalization does not support fused=True.")
        kwargs.pop("synchronized", None)   # fuse does the synchronising
        super().__init__(**kwargs)
        self.process_set = process_set

    def _moments(self, inputs, mask):
        if len(self.process_set.ranks) == 1 or not self.process_set.included():
            return super()._moments(inputs, mask)
        if mask is not None:
            raise ValueError("SyncBatchNormalization does not support masks")
        axes = list(self._reduction_axes)
        x = tf.convert_to_tensor(inputs)
        local_sum = tf.reduce_sum(x, axis=axes)
        local_sq = tf.reduce_sum(tf.square(x), axis=axes)
        count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(x), axes)), x.dtype)
        width = tf.size(local_sum)
        packed = tf.concat([tf.reshape(local_sum, [-1]), tf.reshape(local_sq, [-1]),
                            tf.reshape(count, [1])], 0)
        total = mpi_ops.allreduce(packed, op=Sum, name=None, process_set=self.process_set)
        n = total[-1]
        mean = tf.reshape(total[:width] / n, tf.shape(local_sum))
        mean_sq = tf.reshape(total[width:2 * width] / n, tf.shape(local_sum))
        variance = tf.maximum(mean_sq - tf.square(mean), 0.0)
        return mean, variance

    def get_config(self):
        config = super().get_config()
        config.pop("synchronized", None)
        return config
