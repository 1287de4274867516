"""Horovod's Keras callbacks for Keras 3."""

from __future__ import annotations

import keras
import numpy as np

from fuse.worker import lifecycle
from fuse.collectives import calls as _c
from fuse.collectives.ops import Average
from fuse.collectives.array_ops import NumpyOps
from fuse.frameworks.tensorflow.functions import broadcast_variables

_numpy = NumpyOps()


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """At the start of training, give every rank ``root_rank``'s model variables (trainable
    and not) and optimizer variables, so all workers start from the same state.

    Keras 3 builds the optimizer before training starts, so one broadcast at
    ``on_train_begin`` covers everything; an optimizer that is built lazily by the first
    step is broadcast again after that step.  ``local_variables`` are left alone; ``device``
    is accepted for compatibility."""

    def __init__(self, root_rank, device="", local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.local_variables = {id(v) for v in (local_variables or [])}
        self.broadcast_done = False
        self._again_after_first_batch = False

    def _variables(self):
        found, seen = [], set()
        optimizer = getattr(self.model, "optimizer", None)
        opt_vars = list(optimizer.variables) if optimizer is not None else []
        for v in list(self.model.variables) + opt_vars:
            if id(v) not in seen and id(v) not in self.local_variables:
                seen.add(id(v))
                found.append(v)
        return found

    def _broadcast(self):
        broadcast_variables(self._variables(), self.root_rank)

    def on_train_begin(self, logs=None):
        if self.broadcast_done:
            return
        self._broadcast()
        optimizer = getattr(self.model, "optimizer", None)
        self._again_after_first_batch = optimizer is not None and not optimizer.built
        self.broadcast_done = True

    def on_train_batch_end(self, batch, logs=None):
        if self._again_after_first_batch:
            self._broadcast()
            self._again_after_first_batch = False


class MetricAverageCallback(keras.callbacks.Callback):
    """At the end of every epoch, replace each metric in ``logs`` by its average over the
    workers (put it before callbacks that read the metrics).  ``device`` is accepted for
    compatibility."""

    def __init__(self, device=""):
        super().__init__()

    def on_epoch_end(self, epoch, logs=None):
        if logs is None or lifecycle.size() == 1:
            return
        keys = sorted(k for k, v in logs.items() if np.ndim(v) == 0 and not isinstance(v, str))
        local = np.array([float(logs[k]) for k in keys], np.float64)
        names = _c.allgather_object(keys, name=f"MetricAverageCallback.keys.{epoch}")
        if any(n != keys for n in names):
            raise ValueError(f"MetricAverageCallback: the workers log different metrics at "
                             f"epoch {epoch}: " + "; ".join(f"rank {r}: {n}"
                                                            for r, n in enumerate(names)))
        if not keys:
            return
        averaged = _c.synchronize(_c.allreduce_async(
            _numpy, local, name=f"MetricAverageCallback.{epoch}", op=Average))
        for k, v in zip(keys, averaged):
            logs[k] = float(v)


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Set the learning rate to ``initial_lr * multiplier(epoch)`` between ``start_epoch``
    and ``end_epoch`` (``multiplier`` is a number or a function of the epoch).  With
    ``staircase=False`` the epoch is fractional and the rate changes every batch.

    ``momentum_correction`` is accepted but has no effect: a Keras 3 optimizer's momentum is a
    constant compiled into the training step, so it cannot be rescaled per batch."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        self.initial_lr = initial_lr
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch: multiplier)
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = 0

    def _in_range(self, epoch) -> bool:
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _set_lr(self, epoch):
        lr = self.initial_lr * self.multiplier(epoch)
        self.model.optimizer.learning_rate = lr
        return lr

    def on_train_begin(self, logs=None):
        if self.initial_lr is None:
            self.initial_lr = float(np.asarray(self.model.optimizer.learning_rate))
        if self.steps_per_epoch is None:
            self.steps_per_epoch = (self.params or {}).get("steps")
        if not self.staircase and not self.steps_per_epoch:
            raise ValueError("LearningRateScheduleCallback with staircase=False needs "
                             "steps_per_epoch (Keras did not report it)")

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch
        if self.staircase and self._in_range(epoch):
            self._set_lr(epoch)

    def on_train_batch_begin(self, batch, logs=None):
        if self.staircase:
            return
        epoch = self.current_epoch + float(batch) / self.steps_per_epoch
        if self._in_range(epoch):
            self._set_lr(epoch)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = float(np.asarray(self.model.optimizer.learning_rate))


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Ramp the learning rate from ``initial_lr / size()`` up to ``initial_lr`` over
    ``warmup_epochs`` (batch by batch), as "Accurate, Large Minibatch SGD" recommends for
    large effective batches."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        def multiplier(epoch):
            # the rate set before a batch is the one reached after it, so the last warm-up
            # batch already runs at initial_lr
            epoch += 1.0 / self.steps_per_epoch
            size = lifecycle.size()
            return 1.0 / size * (epoch * (size - 1) / warmup_epochs + 1)
        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch)
        self.warmup_epochs = warmup_epochs
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.warmup_epochs - 1:
            # land exactly on initial_lr at the end of the warm-up
            self.model.optimizer.learning_rate = self.initial_lr
            if self.verbose > 0 and lifecycle.rank() == 0:
                print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to "
                      f"{self.initial_lr:g}.")


class BestModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """Keep the best model seen so far: ``keras.callbacks.ModelCheckpoint`` with
    ``save_best_only=True``, as Horovod's.  Horovod leaves ``filepath`` to be set later (its
    Spark estimator does); Keras 3 needs one when the callback is made, so it is an optional
    last argument here (default ``best_model.keras``, or ``best_model.weights.h5`` with
    ``save_weights_only``).  Like any checkpoint callback, give it to rank 0 only."""

    def __init__(self, monitor="val_loss", verbose=0, save_weights_only=False, mode="auto",
                 save_freq="epoch", filepath=None):
        if filepath is None:
            filepath = "best_model.weights.h5" if save_weights_only else "best_model.keras"
        super().__init__(filepath, monitor=monitor, verbose=verbose, save_best_only=True,
                         save_weights_only=save_weights_only, mode=mode, save_freq=save_freq)


__all__ = ["BroadcastGlobalVariablesCallback", "MetricAverageCallback",
           "LearningRateScheduleCallback", "LearningRateWarmupCallback",
           "BestModelCheckpoint"]
