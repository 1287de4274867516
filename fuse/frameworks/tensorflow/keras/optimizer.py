"""``DistributedOptimizer`` for Keras 3 optimizers.

The distributed optimizer is an instance of a subclass of the user's optimizer class (so
``isinstance(opt, keras.optimizers.Adam)`` holds and Keras trains it like any optimizer) whose
``apply`` averages the gradients over the workers first.  The subclass is made once per
optimizer class and cached; the instance is rebuilt from the optimizer's config, as Horovod
does, so the caller's optimizer is left untouched.

With ``backward_passes_per_step=N`` the gradients of N calls to ``apply`` are summed locally
in accumulator variables (owned by the optimizer, so checkpoints keep them) and only every
N-th call reduces and applies them (divided by N when ``average_aggregated_gradients``).
Inside ``tf.function`` that choice is a ``tf.cond``: every rank takes the same branch on the
same step, so the collectives stay in step.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from fuse.collectives.ops import Average, Sum, resolve_op
from fuse.job.process_sets import global_process_set
from fuse.frameworks.tensorflow.gradients import GradientReducer
from fuse.frameworks.tensorflow.tensors import Compression


class _DistributedMixin:
    """What the distributed subclass adds to a Keras optimizer class."""

    _fuse_reducer: GradientReducer
    _fuse_passes = 1
    _fuse_average_aggregated = False

    def build(self, variables):
        super().build(variables)
        if self._fuse_passes > 1 and getattr(self, "_fuse_accumulators", None) is None:
            self._fuse_accumulators = [
                self.add_variable_from_reference(v, name="fuse_accumulated_gradient")
                for v in variables]
            self._fuse_pass_count = self.add_variable(shape=(), dtype="int64",
                                                      initializer="zeros",
                                                      name="fuse_pass_count")

    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        variables = (list(trainable_variables) if trainable_variables is not None
                     else list(self._trainable_variables))
        if self._fuse_passes == 1:
            reduced = self._fuse_reducer.reduce(grads, variables)
            return super().apply(reduced, trainable_variables)
        if not self.built:
            self.build(variables)
            self.built = True
        accumulators = [self._fuse_accumulators[self._get_variable_index(v)]
                        for v in variables]
        for acc, g in zip(accumulators, grads):
            if g is not None:
                acc.assign_add(tf.convert_to_tensor(g))
        self._fuse_pass_count.assign_add(1)
        scale = 1.0 / self._fuse_passes if self._fuse_average_aggregated else 1.0

        def reduce_and_apply():
            totals = [tf.identity(acc.value) if g is not None else None
                      for acc, g in zip(accumulators, grads)]
            reduced = self._fuse_reducer.reduce(totals, variables, postscale=scale)
            super(_DistributedMixin, self).apply(reduced, variables)
            for acc in accumulators:
                acc.assign(tf.zeros_like(acc.value))
            self._fuse_pass_count.assign(0)
            return tf.constant(True)

        if tf.executing_eagerly():
            if int(self._fuse_pass_count.numpy()) >= self._fuse_passes:
                reduce_and_apply()
            return None
        tf.cond(self._fuse_pass_count.value >= self._fuse_passes, reduce_and_apply,
                lambda: tf.constant(False))
        return None

    @property
    def backward_passes_per_step(self) -> int:
        return self._fuse_passes

    def register_local_var(self, var) -> None:
        """Keep ``var``'s gradient on this worker (model-parallel variables): not reduced,
        only divided by the set size when ``scale_local_gradients`` (Horovod's)."""
        self._fuse_reducer.register_local(var)


_SUBCLASSES: dict[type, type] = {}


def distributed_class(base: type) -> type:
    """The distributed subclass of the Keras optimizer class ``base`` (made once).  It keeps
    ``base``'s name and module, so a saved model names the plain optimizer and
    :func:`load_model` wraps it again."""
    if issubclass(base, _DistributedMixin):
        return base
    cls = _SUBCLASSES.get(base)
    if cls is None:
        cls = type(base.__name__, (_DistributedMixin, base),
                   {"__module__": base.__module__, "__qualname__": base.__qualname__})
        _SUBCLASSES[base] = cls
    return cls


def _configure(opt, compression, sparse_as_dense, gradient_predivide_factor, op,
               backward_passes_per_step, average_aggregated_gradients, num_groups, groups,
               process_set, scale_local_gradients=True):
    op = resolve_op(op, None)
    if op not in (Average, Sum):
        raise ValueError("fuse.keras DistributedOptimizer supports only op=Average or op=Sum")
    if int(backward_passes_per_step) < 1:
        raise ValueError("backward_passes_per_step must be >= 1, got "
                         f"{backward_passes_per_step}")
    opt._fuse_reducer = GradientReducer("DistributedOptimizer", compression, sparse_as_dense,
                                        op, gradient_predivide_factor, num_groups, groups,
                                        process_set, scale_local_gradients)
    opt._fuse_passes = int(backward_passes_per_step)
    opt._fuse_average_aggregated = bool(average_aggregated_gradients)
    return opt


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """A copy of the Keras 3 ``optimizer`` whose ``apply``/``apply_gradients`` (and so
    ``model.fit``) first averages the gradients over ``process_set``.

    Args:
        optimizer: a ``keras.optimizers.Optimizer`` (not yet used: it is rebuilt from its
            config).
        name: a new name for the optimizer (default: the optimizer's own).
        compression: ``Compression.none``, ``.fp16`` or ``.bf16`` for the wire.
        sparse_as_dense: reduce ``tf.IndexedSlices`` gradients as dense tensors.
        gradient_predivide_factor: divide by f before the sum and multiply by f after.
        op: ``Average`` (default) or ``Sum``.
        backward_passes_per_step: reduce and apply every N calls, summing locally between.
        average_aggregated_gradients: divide the N summed gradients by N.
        num_groups / groups: fuse gradients into groups (an int, or lists of variables).
        process_set: the workers to average over.
        scale_local_gradients: divide the gradients of variables registered with
            ``register_local_var`` by the set size, as Horovod does.
        device_dense, device_sparse: accepted for compatibility.
    """
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError("fuse.keras.DistributedOptimizer wraps a Keras 3 optimizer "
                        f"(keras.optimizers.Optimizer), got {type(optimizer).__name__}")
    config = optimizer.get_config()
    if name is not None:
        config["name"] = name
    opt = distributed_class(type(optimizer)).from_config(config)
    return _configure(opt, compression, sparse_as_dense, gradient_predivide_factor, op,
                      backward_passes_per_step, average_aggregated_gradients, num_groups,
                      groups, process_set, scale_local_gradients)


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                                compression=Compression.none, sparse_as_dense=False,
                                gradient_predivide_factor=1.0, op=Average,
                                backward_passes_per_step=1, average_aggregated_gradients=False,
                                groups=None, process_set=global_process_set, local_layers=None,
                                scale_local_gradients=True):
    """A :func:`DistributedOptimizer` whose gradients for the trainable weights of
    ``local_layers`` (a Keras layer or a list of them) stay on this worker, as Horovod's: for
    model-parallel parts of a model.  Other arguments as :func:`DistributedOptimizer`."""
    from fuse.frameworks.tensorflow.gradient_tape import layer_weights
    opt = DistributedOptimizer(optimizer, name, device_dense, device_sparse, compression,
                               sparse_as_dense, gradient_predivide_factor, op,
                               backward_passes_per_step, average_aggregated_gradients, 0,
                               groups, process_set, scale_local_gradients)
    for weight in layer_weights(local_layers):
        opt.register_local_var(weight)
    return opt


def make_distributed_in_place(optimizer, compression=Compression.none):
    """Turn an optimizer that already holds state (one loaded from a file) into a
    distributed one without losing its variables."""
    optimizer.__class__ = distributed_class(type(optimizer))
    return _configure(optimizer, compression, False, 1.0, Average, 1, False, 0, None,
                      global_process_set)
