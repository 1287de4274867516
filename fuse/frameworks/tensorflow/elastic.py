"""``fuse.tensorflow.elastic``: ``run``, ``TensorFlowKerasState`` and ``TensorFlowState``
(Horovod's ``horovod.tensorflow.elastic``; TensorFlow 2 eager and ``tf.function`` only).

The states keep their variables' values in host memory at ``commit()`` (``save``), put them back
at ``restore()`` and broadcast rank 0's at ``sync()``.  ``run`` is the common elastic loop
(:mod:`fuse.worker.elastic`), which also recognises a collective's failure that TensorFlow
wrapped in one of its own errors (a collective inside ``tf.function`` or ``model.fit`` raises
through TensorFlow's runtime).
"""

from __future__ import annotations

import functools

import tensorflow as tf

from fuse.worker import lifecycle
from fuse.worker import elastic as _elastic
from fuse.worker.elastic import State  # noqa: F401
from fuse.exceptions import (FuseInternalError, HorovodInternalError,  # noqa: F401
                             HostsUpdatedInterrupt)
from fuse.frameworks.tensorflow.functions import broadcast_object, broadcast_variables

__all__ = ["run", "run_fn", "State", "ObjectState", "TensorFlowKerasState", "TensorFlowState"]

# the exception names fuse's collectives raise; TensorFlow keeps them in its error's message
_INTERNAL_NAMES = ("FuseInternalError", "ShutdownError", "StallError", "BackendError",
                   "MismatchError", "HorovodInternalError", "GlooError")


def _bcast_object(obj, name="fuse.elastic.object_state"):
    return broadcast_object(obj, 0, name=name)


def _as_internal(func):
    """Turn a TensorFlow error that carries a fuse collective failure into FuseInternalError."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except tf.errors.OpError as err:
            if any(name in str(err.message) for name in _INTERNAL_NAMES):
                raise FuseInternalError(str(err.message)) from err
            raise
    return wrapper


def run_fn(func, reset=None):
    return _elastic.run_fn(_as_internal(func), *(() if reset is None else (reset,)))


def run(func):
    """Decorator: ``@hvd.elastic.run def train(state, ...)``; see :mod:`fuse.worker.elastic`."""
    return run_fn(func)


class ObjectState(_elastic.ObjectState):
    def __init__(self, **kwargs):
        super().__init__(bcast_object=_bcast_object, get_rank=lifecycle.rank, **kwargs)


def _optimizer_variables(optimizer, model_variables):
    if optimizer is None:
        return []
    if not getattr(optimizer, "built", True) and hasattr(optimizer, "build"):
        # a new worker's optimizer has no slots yet: make them, so that every rank broadcasts
        # the same list of variables
        optimizer.build(model_variables)
    return list(optimizer.variables)


class _VariablesState(_elastic.ObjectState):
    """Variables kept by value; subclasses say which (``_variables()``)."""

    def _variables(self):
        raise NotImplementedError

    def save(self):
        self._saved_values = [v.numpy() for v in self._variables()]
        super().save()

    def restore(self):
        for var, value in zip(self._variables(), self._saved_values):
            var.assign(value)
        super().restore()

    def sync(self):
        broadcast_variables(self._variables(), root_rank=0)
        # as Horovod: what a later restore() goes back to is the synced values, not this
        # worker's values from before the sync
        self._saved_values = [v.numpy() for v in self._variables()]
        super().sync()


class TensorFlowKerasState(_VariablesState):
    """``TensorFlowKerasState(model, optimizer=None, backend=None, **kwargs)``: a built Keras
    model and its optimizer (default ``model.optimizer``); other kwargs as in ObjectState."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        self.model = model
        if not getattr(model, "built", True):
            raise ValueError("TensorFlowKerasState: the model must be built (call it on a batch "
                             "or model.build(input_shape) first)")
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer",
                                                                         None)
        self.backend = backend
        super().__init__(bcast_object=_bcast_object, get_rank=lifecycle.rank, **kwargs)
        self._saved_values = [v.numpy() for v in self._variables()]

    def _variables(self):
        model_vars = list(self.model.variables)
        return model_vars + _optimizer_variables(self.optimizer, self.model.trainable_variables)


class TensorFlowState(_VariablesState):
    """``TensorFlowState(variables=None, session=None, **kwargs)``: a list of ``tf.Variable``
    (TensorFlow 2: the list is required; ``session`` is TF1's and not supported)."""

    def __init__(self, variables=None, session=None, **kwargs):
        if session is not None:
            raise ValueError("TensorFlowState: TF1 sessions are not supported")
        if variables is None:
            raise ValueError("TensorFlowState: give the variables (TensorFlow 2 has no global "
                             "variable collection)")
        self.variables = list(variables)
        super().__init__(bcast_object=_bcast_object, get_rank=lifecycle.rank, **kwargs)
        self._saved_values = [v.numpy() for v in self.variables]

    def _variables(self):
        return self.variables
