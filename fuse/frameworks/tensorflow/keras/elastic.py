"""``fuse.keras.elastic`` / ``fuse.tensorflow.keras.elastic``: ``KerasState``, the callbacks
that commit and track progress during ``model.fit``, and ``run`` (Horovod's
``horovod.keras.elastic``).

    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    callbacks = [hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state),
                 hvd.elastic.CommitStateCallback(state, batches_per_commit=10)]

    @hvd.elastic.run
    def train(state):
        state.model.fit(data, steps_per_epoch=..., epochs=epochs - state.epoch,
                        callbacks=callbacks)
"""

from __future__ import annotations

import keras

from fuse.frameworks.tensorflow.elastic import (ObjectState, State,  # noqa: F401
                                                TensorFlowKerasState, run, run_fn)

__all__ = ["run", "run_fn", "State", "ObjectState", "KerasState", "TensorFlowKerasState",
           "CommitStateCallback", "UpdateBatchStateCallback", "UpdateEpochStateCallback"]


class KerasState(TensorFlowKerasState):
    """``KerasState(model, optimizer=None, **kwargs)``: the model's (and optimizer's)
    variables, and any picklable kwargs."""

    def __init__(self, model, optimizer=None, **kwargs):
        super().__init__(model, optimizer=optimizer, **kwargs)


class CommitStateCallback(keras.callbacks.Callback):
    """Commit the state every ``batches_per_commit`` batches and at the end of each epoch.
    Put it after the Update*StateCallbacks, so that what it commits is up to date."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining <= 0:
            # counted again before committing: a commit that raises (the hosts changed) must
            # leave the count as on the workers that join now
            self.batches_remaining = self.batches_per_commit
            self.state.commit()

    def on_epoch_end(self, epoch, logs=None):
        self.batches_remaining = self.batches_per_commit
        self.state.commit()

    def on_train_begin(self, logs=None):
        # fit starts again after a reset: every worker, old or new, counts from here
        self.batches_remaining = self.batches_per_commit


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """Keep ``state.batch``: the batches of the current epoch done so far (0 at an epoch's
    end).  After a reset mid-epoch, the first epoch of the next ``fit`` is shortened by what
    was done already (``steps_per_epoch`` minus ``state.batch``)."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.steps_per_epoch = None
        self._offset = 0

    def on_epoch_begin(self, epoch, logs=None):
        steps = self.params.get("steps") if self.params else None
        if steps:
            if self.steps_per_epoch is None:
                self.steps_per_epoch = steps
            self.params["steps"] = self.steps_per_epoch - self.state.batch
        self._offset = self.state.batch

    def on_batch_end(self, batch, logs=None):
        self.state.batch = self._offset + batch + 1

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0
        self._offset = 0


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """Keep ``state.epoch``: the epochs finished (pass ``epochs=total - state.epoch`` to fit)."""

    def __init__(self, state):
        super().__init__()
        self.state = state

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch += 1
