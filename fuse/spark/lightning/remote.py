"""What each rank runs for :class:`fuse.spark.lightning.TorchEstimator`: a Lightning
``Trainer`` with fuse's strategy (:mod:`fuse.lightning`) on this rank's shard, as Horovod's
estimator ran one with ``HorovodStrategy``.  The Trainer is the package's the module is built
on (``lightning.pytorch`` or ``pytorch_lightning``), so the user's callbacks, loggers,
profilers and ``trainer_args`` are the Trainer's own.

Around the user's: the run's checkpoint goes into the store after every epoch (rank 0) and a
run whose checkpoint is there already resumes from it (Lightning restores the module, the
optimizers, the schedulers and the loops); each epoch's logged metrics make the history; logs
go to a local folder that rank 0 copies into the store's logs path at the end.
"""

from __future__ import annotations

import importlib
import math
import os
import tempfile

__all__ = ["train", "lightning_package"]


def lightning_package(model) -> str:
    """``"lightning.pytorch"`` or ``"pytorch_lightning"``: the package whose LightningModule
    ``model`` is (each Trainer takes only its own package's modules)."""
    for name in ("lightning.pytorch", "pytorch_lightning"):
        try:
            package = importlib.import_module(name)
        except ImportError:
            continue
        if isinstance(model, package.LightningModule):
            return name
    raise ValueError(f"model must be a LightningModule (lightning.pytorch or "
                     f"pytorch_lightning), got {type(model).__name__}")


class _Batches:
    """This rank's batches as an iterable the Trainer's DataLoader takes: dicts column ->
    tensor, features shaped by ``input_shapes``, scalar columns of shape (batch,) as
    Horovod's estimator gives them.  One stream across epochs (its rows carry over)."""

    def __init__(self, reader, columns, shapes, metadata):
        self.reader, self.columns, self.shapes, self.metadata = reader, columns, shapes, metadata
        self.stream = None

    def __iter__(self):
        if self.stream is None:
            self.stream = self._tensors()
        return self.stream

    def _tensors(self):
        from fuse.spark.torch.remote import batch_tensors
        for batch in self.reader:
            tensors = batch_tensors(batch, self.columns, self.shapes, self.metadata,
                                    scalars_as_columns=False)
            yield dict(zip(self.columns, tensors))


def _loader(batches):
    import torch
    from torch.utils.data import DataLoader, IterableDataset

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(batches)

    torch.set_num_threads(1)
    return DataLoader(Stream(), batch_size=None, num_workers=0)


def _loss_of(output) -> float | None:
    """The loss a training or validation step returned (a tensor, or a dict with 'loss')."""
    import torch
    loss = output.get("loss") if isinstance(output, dict) else output
    return float(loss.detach()) if isinstance(loss, torch.Tensor) and loss.numel() == 1 else None


def _callbacks(pl, spec, checkpoint, history, local_dir):
    """The estimator's callbacks, then the user's."""
    store = spec.store

    class History(pl.Callback):
        """Each epoch's logged metrics, as floats, into ``history``; and the mean of the
        losses the steps returned, as ``loss`` and ``val_loss`` where the module logs no
        metric of that name."""

        def __init__(self):
            self.losses = {"loss": [], "val_loss": []}

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            self.losses["loss"].append(_loss_of(outputs))

        def on_validation_batch_end(self, trainer, module, outputs, batch, batch_idx,
                                    dataloader_idx=0):
            if not trainer.sanity_checking:
                self.losses["val_loss"].append(_loss_of(outputs))

        def on_train_epoch_end(self, trainer, module):
            logged = {k: float(v) for k, v in trainer.callback_metrics.items()}
            for name, values in self.losses.items():
                values = [v for v in values if v is not None]
                if name not in logged and values:
                    logged[name] = sum(values) / len(values)
            for name, value in logged.items():
                history.setdefault(name, []).append(value)
            self.losses = {"loss": [], "val_loss": []}

    class StoreCheckpoint(pl.Callback):
        """The run's checkpoint into the store after every epoch (written by rank 0)."""

        def on_train_epoch_end(self, trainer, module):
            local = os.path.join(local_dir, "checkpoint.ckpt")
            trainer.save_checkpoint(local)      # every rank: it is collective
            if trainer.is_global_zero:
                with open(local, "rb") as f:
                    store.write(checkpoint, f.read())

    class TerminateOnNan(pl.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            import torch
            loss = outputs["loss"] if isinstance(outputs, dict) else outputs
            if isinstance(loss, torch.Tensor) and not torch.isfinite(loss).all():
                raise FloatingPointError(f"the loss is {float(loss)} at step {batch_idx} of "
                                         f"epoch {trainer.current_epoch} (terminate_on_nan)")

    ours = [History()]
    if checkpoint:
        ours.append(StoreCheckpoint())
    if spec.terminate_on_nan:
        ours.append(TerminateOnNan())
    return ours + list(spec.callbacks or [])


def _trainer_args(pl, spec, model, callbacks, steps, val_steps, local_dir) -> dict:
    """The Trainer's arguments: the estimator's settings, then ``trainer_args`` over them
    (Lightning 1.x's ``stochastic_weight_avg=True`` becomes its callback)."""
    import torch
    extra = dict(spec.trainer_args or {})
    if extra.pop("stochastic_weight_avg", False):
        lrs = [g["lr"] for g in first_optimizer(model.configure_optimizers()).param_groups]
        callbacks = callbacks + [pl.callbacks.StochasticWeightAveraging(swa_lrs=lrs)]
    user_checkpoints = any(isinstance(c, pl.callbacks.ModelCheckpoint) for c in callbacks)
    gpu = bool(spec.use_gpu) and torch.cuda.is_available()
    args = {"accelerator": "gpu" if gpu else "cpu", "devices": 1, "max_epochs": spec.epochs,
            "callbacks": callbacks, "logger": spec.logger if spec.logger is not None else True,
            "default_root_dir": local_dir, "limit_train_batches": steps,
            "limit_val_batches": val_steps if spec.has_validation else 0,
            "num_sanity_val_steps": 0, "log_every_n_steps": spec.log_every_n_steps,
            "enable_checkpointing": user_checkpoints, "enable_progress_bar": False,
            "enable_model_summary": bool(spec.verbose), "use_distributed_sampler": False,
            "profiler": spec.profiler}
    args.update(extra)
    return args


def _module(spec, pl_name):
    model = spec.model
    if spec.legacy is not None:         # a plain nn.Module with its optimizer and loss
        from .legacy import to_lightning_module
        base = importlib.import_module(pl_name).LightningModule
        model = to_lightning_module(model, base=base, **spec.legacy)
    from .epoch_end_hooks import with_epoch_end_hooks
    return with_epoch_end_hooks(model)


def train(spec):
    import torch

    import fuse.lightning  # noqa: F401  (fuse's strategy for both Lightning packages)
    import fuse.torch as hvd
    from fuse.spark.common.reader import ShardReader

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    if spec.random_seed is not None:
        torch.manual_seed(spec.random_seed)
    pl_name = "pytorch_lightning" if spec.package == "pytorch_lightning" else "lightning.pytorch"
    pl = importlib.import_module(pl_name)
    strategy = importlib.import_module("fuse.lightning.pytorch_lightning" if
                                       pl_name == "pytorch_lightning" else
                                       "fuse.lightning.bindings").FuseStrategy
    model = _module(spec, pl_name)
    data, metadata = spec.data, spec.data.columns
    columns = list(dict.fromkeys(spec.feature_cols + spec.label_cols +
                                 ([spec.sample_weight_col] if spec.sample_weight_col else [])))
    shapes = {**dict(zip(spec.label_cols, spec.label_shapes or [])),
              **dict(zip(spec.feature_cols, spec.input_shapes or []))}

    def loader(path, batch_size, shuffle):
        reader = ShardReader(spec.store, path, rank, size, columns, batch_size, shuffle=shuffle,
                             buffer_size=spec.shuffle_buffer_size, seed=spec.random_seed,
                             transformation_fn=spec.transformation_fn).batches()
        return _loader(_Batches(reader, columns, shapes, metadata))

    steps = spec.train_steps_per_epoch or max(1, math.ceil(
        data.train_rows / (spec.batch_size * size)))
    val_steps = spec.validation_steps_per_epoch or max(1, math.ceil(
        data.val_rows / (spec.val_batch_size * size)))
    spec.has_validation = bool(data.val_path)
    store, checkpoint = spec.store, spec.store.get_checkpoint_path(spec.run_id)
    history: dict = {}
    with tempfile.TemporaryDirectory(prefix="fuse-lightning-") as local_dir:
        resume = _local_checkpoint(hvd, store, checkpoint, local_dir)
        callbacks = _callbacks(pl, spec, checkpoint, history, local_dir)
        trainer = pl.Trainer(strategy=strategy(), **_trainer_args(
            pl, spec, model, callbacks, steps, val_steps, local_dir))
        trainer.fit(model, train_dataloaders=loader(data.train_path, spec.batch_size,
                                                    spec.shuffle),
                    val_dataloaders=(loader(data.val_path, spec.val_batch_size, False)
                                     if data.val_path else None),
                    ckpt_path=resume)
        if rank == 0:
            _keep_logs(store, spec.run_id, local_dir)
    if rank != 0:
        return None
    trained = model.model if spec.legacy is not None else model
    return {"model": {k: v.detach().cpu() for k, v in trained.state_dict().items()},
            "history": history}


def _local_checkpoint(hvd, store, checkpoint, local_dir) -> str | None:
    """The run's checkpoint from the store as a local file to resume from (every rank reads
    it: the store is shared), or None when the run starts afresh (rank 0's word)."""
    found = hvd.broadcast_object(bool(checkpoint) and store.exists(checkpoint), root_rank=0)
    if not found:
        return None
    path = os.path.join(local_dir, "resume.ckpt")
    with open(path, "wb") as f:
        f.write(store.read(checkpoint))
    return path


def _keep_logs(store, run_id: str, local_dir: str) -> None:
    """Rank 0's logs (the default logger writes under ``local_dir``) into the store's logs
    path for the run."""
    logs = store.get_logs_path(run_id)
    if not logs:
        return
    for folder in ("lightning_logs", "logs"):
        source = os.path.join(local_dir, folder)
        if os.path.isdir(source):
            from pyarrow import fs
            fs.copy_files(source, store.get_localized_path(logs),
                          source_filesystem=fs.LocalFileSystem(),
                          destination_filesystem=store.filesystem)


def first_optimizer(configured):
    """The optimizer out of whatever ``configure_optimizers`` returned."""
    import torch
    if isinstance(configured, torch.optim.Optimizer):
        return configured
    if isinstance(configured, dict):
        return first_optimizer(configured["optimizer"])
    if isinstance(configured, (list, tuple)) and configured:
        return first_optimizer(configured[0])
    raise ValueError(f"configure_optimizers() returned {type(configured).__name__}: fuse's "
                     "Lightning estimator takes an optimizer, a list of them, or a dict with "
                     "'optimizer'")
