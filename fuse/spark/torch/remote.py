"""What each rank runs for :class:`fuse.spark.torch.TorchEstimator`: read its shard, train the
model under fuse's DistributedOptimizer, average the metrics over the ranks, and (rank 0)
checkpoint the run into the store after every epoch.  A run whose checkpoint is in the store
already goes on from the epoch after it.
"""

from __future__ import annotations

import copy
import io
import math

__all__ = ["train", "loss_functions", "batch_tensors", "compute_loss", "optimizer_for"]


def loss_functions(loss, loss_constructors, count: int) -> list:
    """One loss function per label column (a single one serves them all)."""
    if loss is None and loss_constructors:
        loss = [make() for make in loss_constructors]
    fns = list(loss) if isinstance(loss, (list, tuple)) else [loss] * count
    if len(fns) != count:
        raise ValueError(f"{len(fns)} loss function(s) for {count} label column(s)")
    return fns


def batch_tensors(batch: dict, cols: list[str], shapes: dict, metadata: dict,
                  scalars_as_columns: bool = True) -> list:
    """The batch's columns as tensors: floats as float32, integers as int64, each reshaped to
    its ``input_shapes`` entry (see :func:`~fuse.spark.common.dataset.row_shape`); a scalar
    column without one to (batch, 1), or left (batch,) unless ``scalars_as_columns``."""
    import numpy as np
    import torch

    from fuse.spark.common.dataset import row_shape
    out = []
    for c in cols:
        values = batch[c]
        integer = metadata[c].integer if c in metadata else np.issubdtype(values.dtype, np.integer)
        tensor = torch.from_numpy(np.ascontiguousarray(values, dtype=np.int64 if integer
                                                       else np.float32))
        shape = shapes.get(c)
        if shape is not None:
            tensor = tensor.reshape([-1] + row_shape(shape, c))
        elif tensor.dim() == 1 and scalars_as_columns:
            tensor = tensor.reshape(-1, 1)
        out.append(tensor)
    return out


def _match_label(label, output):
    """The label shaped like the output when they hold as many values (regression), else as
    it is (class indices for a classifier's scores)."""
    if label.numel() == output.numel():
        return label.reshape(output.shape).to(output.dtype)
    return label.reshape(-1) if label.dim() == 2 and label.shape[1] == 1 else label


def _per_sample(loss_fn, output, label):
    """``loss_fn``'s loss of each sample (reduction='none')."""
    import torch
    if isinstance(loss_fn, torch.nn.Module) and hasattr(loss_fn, "reduction"):
        fn = copy.copy(loss_fn)
        fn.reduction = "none"
        return fn(output, label)
    return loss_fn(output, label, reduction="none")


def compute_loss(outputs, labels, loss_fns, loss_weights, sample_weights=None):
    """The weighted sum of each output's loss.  With sample weights, each sample's loss is
    multiplied by its weight and the products averaged over the batch (as Horovod does, so
    that a sample's weight counts the same whichever batch it is in)."""
    total = 0.0
    for output, label, fn, weight in zip(outputs, labels, loss_fns, loss_weights):
        label = _match_label(label, output)
        if sample_weights is None:
            value = fn(output, label)
        else:
            losses = _per_sample(fn, output, label).reshape(len(output), -1).mean(dim=1)
            value = (losses * sample_weights.reshape(-1).to(losses.dtype)).mean()
        total = total + value * weight
    return total


def optimizer_for(model, optimizer):
    """The user's optimizer (class, settings, state) rebuilt on this rank's model (it may
    have been made on another instance of the model)."""
    if optimizer is None:
        raise ValueError("optimizer is not set")
    fresh = type(optimizer)(model.parameters(), lr=optimizer.defaults.get("lr", 0.01))
    state = optimizer.state_dict()
    if len(state["param_groups"]) != 1:
        raise ValueError("TorchEstimator takes an optimizer with a single parameter group")
    state["param_groups"][0]["params"] = list(range(len(list(model.parameters()))))
    fresh.load_state_dict(state)
    return fresh


def _restored(hvd, spec, model, optimizer):
    """(first epoch, history) of the run: from its checkpoint in the store, if there is one,
    with the model's and the optimizer's state loaded; then rank 0's state everywhere."""
    import torch
    store, checkpoint = spec.store, spec.store.get_checkpoint_path(spec.run_id)
    # Every rank loads the checkpoint (the store is shared), so that all have the same
    # optimizer state to broadcast: a state on rank 0 only would make the ranks' broadcasts
    # differ.  Which checkpoint is rank 0's word.
    found = hvd.broadcast_object(bool(checkpoint) and store.exists(checkpoint), root_rank=0)
    start_epoch, history = 0, {}
    if found:
        saved = torch.load(io.BytesIO(store.read(checkpoint)), weights_only=False)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        start_epoch, history = saved["epoch"], saved["history"]
    start_epoch, history = hvd.broadcast_object((start_epoch, history), root_rank=0)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    return start_epoch, history


def _save_checkpoint(spec, model, optimizer, epoch: int, history: dict) -> None:
    import torch
    checkpoint = spec.store.get_checkpoint_path(spec.run_id)
    if checkpoint:
        buffer = io.BytesIO()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "epoch": epoch, "history": history}, buffer)
        spec.store.write(checkpoint, buffer.getvalue())


class _Step:
    """One batch's forward pass and loss (and metrics) with the estimator's settings."""

    def __init__(self, spec, model):
        self.spec, self.model = spec, model
        self.metadata = spec.data.columns
        self.loss_fns = loss_functions(spec.loss, spec.loss_constructors, len(spec.label_cols))
        self.loss_weights = list(spec.loss_weights or [1.0] * len(spec.label_cols))
        self.shapes = dict(zip(spec.feature_cols, spec.input_shapes or []))
        self.label_shapes = dict(zip(spec.label_cols, spec.label_shapes or []))

    def __call__(self, batch):
        import torch
        spec = self.spec
        inputs = batch_tensors(batch, spec.feature_cols, self.shapes, self.metadata)
        labels = batch_tensors(batch, spec.label_cols, self.label_shapes, self.metadata)
        weights = (torch.from_numpy(batch[spec.sample_weight_col]).float()
                   if spec.sample_weight_col else None)
        outputs = self.model(*inputs)
        outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        loss = compute_loss(outputs, labels, self.loss_fns, self.loss_weights, weights)
        values = {"loss": loss.detach()}
        for metric in spec.metrics or []:
            for output, label, col in zip(outputs, labels, spec.label_cols):
                name = (metric.__name__ if len(spec.label_cols) == 1
                        else f"{metric.__name__}_{col}")
                values[name] = metric(output.detach(), _match_label(label, output)).detach()
        return loss, values


def _averaged(hvd, sums: dict, count: int, prefix: str) -> dict:
    """Each metric's mean over this rank's ``count`` steps, averaged over the ranks."""
    import torch
    names = sorted(sums)
    local = torch.tensor([float(sums[n]) / count for n in names], dtype=torch.float64)
    total = hvd.allreduce(local, op=hvd.Average, name=f"{prefix}metrics")
    return {prefix + n: float(v) for n, v in zip(names, total)}


def _add(sums: dict, values: dict) -> None:
    for name, value in values.items():
        sums[name] = sums.get(name, 0.0) + float(value)


def _train_epoch(spec, model, optimizer, step, batches, steps: int, passes: int) -> dict:
    """One epoch's steps; the sums of their metrics."""
    model.train()
    sums: dict = {}
    for i in range(steps):
        if i % passes == 0:
            optimizer.zero_grad()
        if spec.train_minibatch_fn is not None:
            loss, values = spec.train_minibatch_fn(model, optimizer, next(batches))
        else:
            loss, values = step(next(batches))
            (loss / passes).backward()
            if (i + 1) % passes == 0 or i + 1 == steps:
                optimizer.step()
        _add(sums, values)
    return sums


def _validate(model, step, batches, steps: int) -> dict:
    import torch
    model.eval()
    sums: dict = {}
    with torch.no_grad():
        for _ in range(steps):
            _add(sums, step(next(batches))[1])
    return sums


def train(spec):
    import torch

    import fuse.torch as hvd
    from fuse.spark.common.reader import ShardReader

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    torch.set_num_threads(1)
    if spec.random_seed is not None:
        torch.manual_seed(spec.random_seed)
    model = spec.model
    optimizer = optimizer_for(model, spec.optimizer)
    start_epoch, history = _restored(hvd, spec, model, optimizer)
    passes = max(1, int(spec.backward_passes_per_step or 1))
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(),
        compression=spec.gradient_compression or hvd.Compression.none,
        backward_passes_per_step=passes)

    data = spec.data
    columns = list(dict.fromkeys(spec.feature_cols + spec.label_cols +
                                 ([spec.sample_weight_col] if spec.sample_weight_col else [])))

    def reader(path, batch_size, shuffle):
        return ShardReader(spec.store, path, rank, size, columns, batch_size, shuffle=shuffle,
                           buffer_size=spec.shuffle_buffer_size, seed=spec.random_seed,
                           transformation_fn=spec.transformation_fn).batches()

    train_batches = reader(data.train_path, spec.batch_size, spec.shuffle)
    steps = spec.train_steps_per_epoch or max(1, math.ceil(
        data.train_rows / (spec.batch_size * size)))
    val_batches = (reader(data.val_path, spec.val_batch_size, False) if data.val_path else None)
    val_steps = spec.validation_steps_per_epoch or max(1, math.ceil(
        data.val_rows / (spec.val_batch_size * size)))
    step = _Step(spec, model)
    for epoch in range(start_epoch, spec.epochs):
        sums = _train_epoch(spec, model, optimizer, step, train_batches, steps, passes)
        logs = _averaged(hvd, sums, steps, "")
        if val_batches is not None:
            logs.update(_averaged(hvd, _validate(model, step, val_batches, val_steps),
                                  val_steps, "val_"))
        for name, value in logs.items():
            history.setdefault(name, []).append(value)
        for callback in spec.callbacks or []:
            callback(epoch, dict(logs))
        if rank == 0 and spec.verbose:
            print(f"epoch {epoch + 1}/{spec.epochs}: " +
                  ", ".join(f"{k}={v:.6g}" for k, v in logs.items()), flush=True)
        if rank == 0:
            _save_checkpoint(spec, model, optimizer, epoch + 1, history)
    if rank != 0:
        return None
    return {"model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
            "optimizer": optimizer.state_dict(), "history": history}
