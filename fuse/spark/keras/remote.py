"""What each rank runs for :class:`fuse.spark.keras.KerasEstimator`: rebuild the model and
optimizer, compile with fuse's DistributedOptimizer, and ``model.fit`` on this rank's shard
(a Python generator of batches from :class:`~fuse.spark.common.reader.ShardReader`), rank 0
checkpointing the run (weights, the optimizer's state and the history) into the store after
every epoch.  A run whose checkpoint is in the store already goes on from the epoch after it,
with the checkpoint's weights and optimizer state.
"""

from __future__ import annotations

import math
import os
import tempfile

__all__ = ["train", "model_to_bytes", "model_from_bytes", "model_input_shapes"]


def model_to_bytes(model) -> bytes:
    """The model (architecture, weights, compile state) as a ``.keras`` file's bytes."""
    with tempfile.TemporaryDirectory(prefix="fuse-keras-") as folder:
        path = os.path.join(folder, "model.keras")
        model.save(path)
        with open(path, "rb") as f:
            return f.read()


def model_from_bytes(data: bytes, custom_objects=None, compile: bool = False):
    import keras
    with tempfile.TemporaryDirectory(prefix="fuse-keras-") as folder:
        path = os.path.join(folder, "model.keras")
        with open(path, "wb") as f:
            f.write(data)
        return keras.models.load_model(path, custom_objects=custom_objects, compile=compile)


def model_input_shapes(model) -> list[list[int]]:
    """Each of the model's inputs' shapes, the batch dimension as -1 (``[-1, 8, 8, 1]``);
    none for a model not built yet (a Sequential model without an input shape)."""
    try:
        inputs = model.inputs
    except (AttributeError, ValueError):
        return []
    return [[-1 if d is None else int(d) for d in tuple(x.shape)] for x in inputs or []]


def shaped_columns(arrays, cols, shapes, columns_for_vectors=False) -> list:
    """The model's inputs (or targets) from a batch of columns: floats as float32 (integers
    kept), each reshaped to its ``shapes`` entry (batch dimension first); with
    ``columns_for_vectors``, a 1-D column without a shape becomes a column of width 1."""
    import numpy as np

    from fuse.spark.common.dataset import row_shape
    out = []
    for c in cols:
        values = arrays[c]
        if not np.issubdtype(values.dtype, np.integer):
            values = values.astype(np.float32)
        shape = shapes.get(c)
        if shape is not None:
            values = values.reshape([-1] + row_shape(shape, c))
        elif columns_for_vectors and values.ndim == 1:
            values = values.reshape(-1, 1)
        out.append(values)
    return out


def _batches(reader, feature_cols, label_cols, weight_col, shapes, label_shapes):
    import numpy as np

    def shaped(batch, cols, table):
        out = shaped_columns(batch, cols, table)
        return tuple(out) if len(out) > 1 else out[0]

    for batch in reader:
        x, y = shaped(batch, feature_cols, shapes), shaped(batch, label_cols, label_shapes)
        if weight_col:
            yield x, y, batch[weight_col].astype(np.float32)
        else:
            yield x, y


def _compiled_model(spec, hvd, saved):
    """The model rebuilt from its bytes and compiled with fuse's DistributedOptimizer; with
    ``saved`` (a checkpoint), its weights and the optimizer's state (Adam's moments, say)."""
    import keras
    model = model_from_bytes(spec.model_bytes, spec.custom_objects)
    optimizer = hvd.DistributedOptimizer(
        keras.optimizers.deserialize(spec.optimizer_config),
        compression=spec.gradient_compression or hvd.Compression.none,
        backward_passes_per_step=max(1, int(spec.backward_passes_per_step or 1)))
    model.compile(optimizer=optimizer, loss=spec.loss, loss_weights=spec.loss_weights,
                  metrics=spec.metrics)
    if saved is not None:
        model.set_weights(saved["weights"])
        optimizer.build(model.trainable_variables)
        state = saved.get("optimizer") or []
        if len(state) == len(optimizer.variables):
            for variable, value in zip(optimizer.variables, state):
                variable.assign(value)
    return model


def _checkpoint_callback(store, checkpoint, rank, history):
    import pickle

    import keras

    class Checkpoint(keras.callbacks.Callback):
        """The history so far, and (rank 0) the model's weights and the optimizer's state
        into the store, after each epoch."""

        def on_epoch_end(self, epoch, logs=None):
            for name, value in (logs or {}).items():
                history.setdefault(name, []).append(float(value))
            if rank == 0 and checkpoint:
                optimizer = [v.numpy() for v in self.model.optimizer.variables]
                store.write(checkpoint, pickle.dumps({
                    "weights": self.model.get_weights(), "optimizer": optimizer,
                    "epoch": epoch + 1, "history": history}))

    return Checkpoint()


def train(spec):
    import pickle

    import keras

    import fuse.keras as hvd
    from fuse.spark.common.reader import ShardReader

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    if spec.random_seed is not None:
        keras.utils.set_random_seed(spec.random_seed)
    store, checkpoint = spec.store, spec.store.get_checkpoint_path(spec.run_id)
    # every rank reads the checkpoint (the store is shared) so that all build the optimizer
    # alike; rank 0's variables are then broadcast (BroadcastGlobalVariablesCallback)
    found = hvd.broadcast_object(bool(checkpoint) and store.exists(checkpoint), root_rank=0)
    saved = pickle.loads(store.read(checkpoint)) if found else None
    start_epoch, history = (saved["epoch"], saved["history"]) if saved else (0, {})
    model = _compiled_model(spec, hvd, saved)

    data = spec.data
    columns = list(dict.fromkeys(spec.feature_cols + spec.label_cols +
                                 ([spec.sample_weight_col] if spec.sample_weight_col else [])))
    shapes = dict(zip(spec.feature_cols, spec.input_shapes or []))
    label_shapes = dict(zip(spec.label_cols, spec.label_shapes or []))

    def batches(path, batch_size, shuffle):
        reader = ShardReader(store, path, rank, size, columns, batch_size, shuffle=shuffle,
                             buffer_size=spec.shuffle_buffer_size, seed=spec.random_seed,
                             transformation_fn=spec.transformation_fn).batches()
        return _batches(reader, spec.feature_cols, spec.label_cols, spec.sample_weight_col,
                        shapes, label_shapes)

    steps = spec.train_steps_per_epoch or max(1, math.ceil(
        data.train_rows / (spec.batch_size * size)))
    validation = {}
    if data.val_path:
        validation = {"validation_data": batches(data.val_path, spec.val_batch_size, False),
                      "validation_steps": spec.validation_steps_per_epoch or max(1, math.ceil(
                          data.val_rows / (spec.val_batch_size * size)))}
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                 hvd.callbacks.MetricAverageCallback(),
                 _checkpoint_callback(store, checkpoint, rank, history)]
    if start_epoch < spec.epochs:
        model.fit(batches(data.train_path, spec.batch_size, spec.shuffle), epochs=spec.epochs,
                  initial_epoch=start_epoch, steps_per_epoch=steps,
                  callbacks=callbacks + list(spec.callbacks or []),
                  verbose=spec.verbose if rank == 0 else 0, **validation)
    if rank != 0:
        return None
    return {"weights": model.get_weights(), "history": history}
