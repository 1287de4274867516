"""``fuse.tensorflow.DistributedOptimizer``: Keras 3 optimizers, as Horovod delegates them."""

from __future__ import annotations

import keras

from fuse.collectives.ops import Average
from fuse.job.process_sets import global_process_set
from fuse.frameworks.tensorflow.keras import optimizer as _keras_optimizer
from fuse.frameworks.tensorflow.tensors import Compression


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="",
                         device_sparse="", compression=Compression.none,
                         sparse_as_dense=False, backward_passes_per_step=1, op=Average,
                         gradient_predivide_factor=1.0, average_aggregated_gradients=False,
                         num_groups=0, groups=None, process_set=global_process_set,
                         scale_local_gradients=True):
    """Wrap a Keras 3 optimizer so that it averages gradients over the workers before
    applying them (see :func:`fuse.tensorflow.keras.DistributedOptimizer`).  TF1's
    ``tf.compat.v1.train.Optimizer`` needs graph sessions and is not supported."""
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError("fuse.tensorflow.DistributedOptimizer wraps a Keras 3 optimizer "
                        "(keras.optimizers.Optimizer); TF1 tf.compat.v1.train optimizers are "
                        f"not supported (got {type(optimizer).__name__}). For custom loops, "
                        "DistributedGradientTape is the TF2 way.")
    return _keras_optimizer.DistributedOptimizer(
        optimizer, name=name, compression=compression, sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients, num_groups=num_groups,
        groups=groups, process_set=process_set)
