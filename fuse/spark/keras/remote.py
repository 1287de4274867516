"""What each rank runs for :class:`fuse.spark.keras.KerasEstimator`: rebuild the model and
optimizer, compile with fuse's DistributedOptimizer, and ``model.fit`` on this rank's shard
(a Python generator of batches from :class:`~fuse.spark.common.reader.ShardReader`), rank 0
checkpointing the run (weights and history) into the store after every epoch.  A run whose
checkpoint is in the store already goes on from the epoch after it, with the checkpoint's
weights (the optimizer's slots, e.g. Adam's moments, start again).
"""

from __future__ import annotations

import math
import os
import tempfile

__all__ = ["train", "model_to_bytes", "model_from_bytes"]


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


def shaped_columns(arrays, cols, shapes, columns_for_vectors=False) -> list:
    """The model's inputs (or targets) from a batch of columns: floats as float32 (integers
    kept), each reshaped to its ``shapes`` entry (batch dimension first); with
    ``columns_for_vectors``, a 1-D column without a shape becomes a column of width 1."""
    import numpy as np
    out = []
    for c in cols:
        values = arrays[c]
        if not np.issubdtype(values.dtype, np.integer):
            values = values.astype(np.float32)
        shape = shapes.get(c)
        if shape is not None:
            values = values.reshape([-1] + [int(d) for d in list(shape)[1:]])
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


def train(spec):
    import keras

    import fuse.keras as hvd
    from fuse.spark.common.reader import ShardReader

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    if spec.random_seed is not None:
        keras.utils.set_random_seed(spec.random_seed)
    store, checkpoint = spec.store, spec.store.get_checkpoint_path(spec.run_id)
    start_epoch, history = 0, {}
    model = model_from_bytes(spec.model_bytes, spec.custom_objects)
    if rank == 0 and checkpoint and store.exists(checkpoint):
        import pickle
        saved = pickle.loads(store.read(checkpoint))
        model.set_weights(saved["weights"])
        start_epoch, history = saved["epoch"], saved["history"]
    start_epoch, history = hvd.broadcast_object((start_epoch, history), root_rank=0)
    optimizer = keras.optimizers.deserialize(spec.optimizer_config)
    optimizer = hvd.DistributedOptimizer(
        optimizer, compression=spec.gradient_compression or hvd.Compression.none,
        backward_passes_per_step=max(1, int(spec.backward_passes_per_step or 1)))
    model.compile(optimizer=optimizer, loss=spec.loss, loss_weights=spec.loss_weights,
                  metrics=spec.metrics)

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

    class Checkpoint(keras.callbacks.Callback):
        """Rank 0: the model and the history so far into the store, after each epoch."""

        def on_epoch_end(self, epoch, logs=None):
            for name, value in (logs or {}).items():
                history.setdefault(name, []).append(float(value))
            if rank == 0 and checkpoint:
                import pickle
                store.write(checkpoint, pickle.dumps({"weights": self.model.get_weights(),
                                                      "epoch": epoch + 1, "history": history}))

    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                 hvd.callbacks.MetricAverageCallback(), Checkpoint()] + list(spec.callbacks or [])
    if start_epoch < spec.epochs:
        model.fit(batches(data.train_path, spec.batch_size, spec.shuffle), epochs=spec.epochs,
                  initial_epoch=start_epoch, steps_per_epoch=steps, callbacks=callbacks,
                  verbose=spec.verbose if rank == 0 else 0, **validation)
    if rank != 0:
        return None
    return {"weights": model.get_weights(), "history": history}
