"""``DistributedGradientTape``: a ``tf.GradientTape`` whose gradients are averaged over the
workers."""

from __future__ import annotations

import tensorflow as tf

from fuse.collectives.ops import Average
from fuse.job.process_sets import global_process_set
from fuse.frameworks.tensorflow.gradients import GradientReducer
from fuse.frameworks.tensorflow.tensors import Compression


class DistributedGradientTape:
    """Wrap ``gradtape``; ``gradient()`` returns the gradients allreduced over
    ``process_set`` (Average by default).  Everything else is the wrapped tape's.

    Args:
        gradtape: a ``tf.GradientTape`` (usually the one just used in a ``with`` block).
        device_dense, device_sparse: accepted for compatibility (no GPU route).
        compression: ``Compression.none``, ``.fp16`` or ``.bf16`` for the wire.
        sparse_as_dense: reduce ``tf.IndexedSlices`` gradients as dense tensors.
        op: ``Average`` (default) or ``Sum``.
        gradient_predivide_factor: divide by f before the sum and multiply by f after.
        num_groups: deprecated spelling of an int ``groups``.
        groups: an int (that many fused groups) or a list of lists of variables.
        process_set: the workers to average over.
        scale_local_gradients: divide the gradients of local sources
            (:meth:`register_local_source`) by the set size, as Horovod does.
    """

    def __init__(self, gradtape, device_dense="", device_sparse="",
                 compression=Compression.none, sparse_as_dense=False, op=Average,
                 gradient_predivide_factor=1.0, num_groups=0, groups=None,
                 process_set=global_process_set, scale_local_gradients=True):
        if not isinstance(gradtape, tf.GradientTape):
            raise TypeError("DistributedGradientTape wraps a tf.GradientTape, got "
                            f"{type(gradtape).__name__}")
        self._tape = gradtape
        self._reducer = GradientReducer("DistributedGradientTape", compression,
                                        sparse_as_dense, op, gradient_predivide_factor,
                                        num_groups, groups, process_set,
                                        scale_local_gradients)

    def register_local_source(self, source) -> None:
        """Keep ``source``'s gradient on this worker (model-parallel variables): it is not
        reduced, only divided by the set size when ``scale_local_gradients``."""
        self._reducer.register_local(source)

    def __getattr__(self, name):
        return getattr(self._tape, name)

    def __enter__(self):
        self._tape.__enter__()
        return self

    def __exit__(self, *exc):
        return self._tape.__exit__(*exc)

    def gradient(self, target, sources, output_gradients=None, use_generic_names=False,
                 **kwargs):
        grads = self._tape.gradient(target, sources, output_gradients, **kwargs)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(grads, expand_composites=False)
        reduced = self._reducer.reduce(flat_grads, flat_sources)
        return tf.nest.pack_sequence_as(grads, reduced) if tf.nest.is_nested(grads) \
            else reduced[0]


def layer_weights(local_layers) -> list:
    if local_layers is None:
        return []
    layers = local_layers if isinstance(local_layers, (list, tuple)) else [local_layers]
    weights = []
    for layer in layers:
        if not hasattr(layer, "trainable_weights"):
            raise ValueError(f"local_layers must be Keras layers, got {type(layer).__name__}")
        weights.extend(layer.trainable_weights)
    return weights


class PartialDistributedGradientTape(DistributedGradientTape):
    """A ``DistributedGradientTape`` whose gradients for the trainable weights of
    ``local_layers`` (a Keras layer or a list of them) stay on this worker, as Horovod's: for
    model-parallel parts of a model.  Other arguments as :class:`DistributedGradientTape`."""

    def __init__(self, gradtape, device_dense="", device_sparse="",
                 compression=Compression.none, sparse_as_dense=False, op=Average,
                 gradient_predivide_factor=1.0, num_groups=0, groups=None,
                 process_set=global_process_set, local_layers=None,
                 scale_local_gradients=True):
        super().__init__(gradtape, device_dense, device_sparse, compression, sparse_as_dense,
                         op, gradient_predivide_factor, num_groups, groups, process_set,
                         scale_local_gradients)
        for weight in layer_weights(local_layers):
            self.register_local_source(weight)
