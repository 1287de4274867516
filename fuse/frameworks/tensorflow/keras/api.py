"""Everything ``fuse.keras`` and ``fuse.tensorflow.keras`` offer (the ``horovod.keras`` /
``horovod.tensorflow.keras`` surface for Keras 3), in one namespace."""

from __future__ import annotations

import keras

from fuse.common.surface import *  # noqa: F401,F403
from fuse.frameworks.tensorflow import mpi_ops as _mpi_ops
from fuse.frameworks.tensorflow.functions import (allgather_object,  # noqa: F401
                                                  broadcast_object)
from fuse.frameworks.tensorflow.keras import callbacks  # noqa: F401
from fuse.frameworks.tensorflow.keras import elastic  # noqa: F401  (hvd.elastic)
from fuse.frameworks.tensorflow.keras.optimizer import (  # noqa: F401
    DistributedOptimizer, PartialDistributedOptimizer)
from fuse.frameworks.tensorflow.keras.optimizer import \
    make_distributed_in_place as _make_distributed_in_place
from fuse.frameworks.tensorflow.sync_batch_norm import SyncBatchNormalization  # noqa: F401
from fuse.frameworks.tensorflow.tensors import Compression  # noqa: F401


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0,
              op=None, compression=Compression.none):
    """``value`` (anything ``tf.constant`` takes) reduced over every worker; Average by
    default."""
    return _mpi_ops.allreduce(value, average=average, name=name, op=op,
                              prescale_factor=prescale_factor,
                              postscale_factor=postscale_factor, compression=compression)


def allgather(value, name=None):
    """Every worker's ``value`` concatenated along the first dimension."""
    return _mpi_ops.allgather(value, name=name)


def broadcast(value, root_rank, name=None):
    """``root_rank``'s ``value`` on every worker."""
    return _mpi_ops.broadcast(value, root_rank, name=name)


def reducescatter(value, name=None, op=Average):
    """``value`` reduced over the workers, each keeping its block of the first dimension."""
    return _mpi_ops.reducescatter(value, name=name, op=op)


def broadcast_global_variables(root_rank):
    """TF1 graph-mode global variables do not exist in Keras 3."""
    raise RuntimeError("broadcast_global_variables needs TF1 graph mode; with Keras 3 use "
                       "callbacks.BroadcastGlobalVariablesCallback(root_rank) or "
                       "fuse.tensorflow.broadcast_variables(model.variables, root_rank)")


def load_model(filepath, custom_optimizers=None, custom_objects=None,
               compression=Compression.none, legacy_opts=False):
    """``keras.models.load_model`` whose compiled optimizer comes back as a fuse
    ``DistributedOptimizer`` with its saved state (slots, iteration count).
    ``custom_optimizers`` are optimizer classes the file may name; ``legacy_opts`` is
    accepted for compatibility (Keras 3 has no legacy optimizers)."""
    objects = {cls.__name__: cls for cls in (custom_optimizers or [])}
    objects.update(custom_objects or {})
    objects.setdefault("SyncBatchNormalization", SyncBatchNormalization)
    model = keras.models.load_model(filepath, custom_objects=objects)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None:
        _make_distributed_in_place(optimizer, compression)
    return model


__all__ = [n for n in dir() if not n.startswith("_") and n not in ("annotations", "keras")]
