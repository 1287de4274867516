"""``fuse.spark.lightning.TorchEstimator`` and ``TorchModel``: Horovod's Spark estimator for
PyTorch Lightning's ``LightningModule`` (``horovod.spark.lightning``).

The ranks run the torch estimator's loop (:mod:`fuse.spark.torch.remote`) with the module's own
methods instead of a loss and an optimizer: ``configure_optimizers()`` gives the optimizer
(wrapped in fuse's DistributedOptimizer), ``training_step(batch, batch_idx)`` the loss and
``validation_step`` the validation loss; ``batch`` is a dict column name -> tensor.  There is
no Lightning ``Trainer`` (so no Trainer callbacks, loggers or ``self.log``): that is fuse's
Lightning strategy's job (``fuse.lightning``).
"""

from __future__ import annotations

from fuse.spark.common.params import declare
from fuse.spark.torch.estimator import TorchEstimator as _TorchEstimator
from fuse.spark.torch.estimator import TorchModel as _TorchModel

__all__ = ["TorchEstimator", "TorchModel"]

LIGHTNING_PARAMS = {
    "trainer_args": (None, "accepted for Horovod's signature; there is no Trainer"),
    "num_gpus": (None, "accepted for Horovod's signature; the ranks use what fuse finds"),
    "logger": (None, "accepted for Horovod's signature; unused"),
    "log_every_n_steps": (50, "accepted for Horovod's signature; unused"),
    "loader_num_epochs": (None, "accepted for Horovod's signature; unused"),
    "terminate_on_nan": (False, "stop training when the loss is NaN"),
    "profiler": (None, "accepted for Horovod's signature; unused"),
    "debug_data_loader": (False, "accepted for Horovod's signature; unused"),
    "train_async_data_loader_queue_size": (None, "accepted for Horovod's signature; unused"),
    "val_async_data_loader_queue_size": (None, "accepted for Horovod's signature; unused"),
}


def _first_optimizer(configured):
    """The optimizer out of whatever ``configure_optimizers`` returned."""
    import torch
    if isinstance(configured, torch.optim.Optimizer):
        return configured
    if isinstance(configured, dict):
        return _first_optimizer(configured["optimizer"])
    if isinstance(configured, (list, tuple)) and configured:
        return _first_optimizer(configured[0])
    raise ValueError(f"configure_optimizers() returned {type(configured).__name__}: fuse's "
                     "Lightning estimator takes an optimizer, a list of them, or a dict with "
                     "'optimizer'")


def make_optimizer(model):
    return _first_optimizer(model.configure_optimizers())


def lightning_steps(model, batch_tensors, batch, columns, shapes, label_shapes, metadata,
                    step, training):
    """One training or validation step through the module's own methods."""
    import torch
    tensors = dict(zip(columns, batch_tensors(batch, columns, {**label_shapes, **shapes},
                                              metadata)))
    out = (model.training_step if training else model.validation_step)(tensors, step)
    loss = out["loss"] if isinstance(out, dict) else out
    if not isinstance(loss, torch.Tensor):
        raise ValueError(f"{'training' if training else 'validation'}_step returned "
                         f"{type(out).__name__}: fuse's Lightning estimator needs the loss "
                         "(a tensor, or a dict with 'loss')")
    if training and getattr(model, "_fuse_terminate_on_nan", False) and torch.isnan(loss):
        raise FloatingPointError(f"the loss is NaN at step {step} (terminate_on_nan)")
    return loss, {"loss": loss.detach()}


class TorchEstimator(_TorchEstimator):
    """Train a ``LightningModule`` on a Spark DataFrame with fuse (see the module's docstring)."""

    def _check_params(self) -> None:
        model = self.getModel()
        for method in ("configure_optimizers", "training_step"):
            if not callable(getattr(model, method, None)):
                raise ValueError(f"model must be a LightningModule with {method}(), got "
                                 f"{type(model).__name__}")

    def _framework_spec(self) -> dict:
        spec = super()._framework_spec()
        self.getModel()._fuse_terminate_on_nan = bool(self.getTerminateOnNan())
        spec.update(optimizer=None, make_optimizer=make_optimizer,
                    lightning_steps=lightning_steps, loss=None, loss_constructors=None,
                    metrics=None, train_minibatch_fn=None)
        return spec

    def _optimizer_for(self, model):
        return make_optimizer(model)


class TorchModel(_TorchModel):
    """A trained LightningModule as a Spark ML ``Model`` (``transform`` calls its forward)."""


declare(TorchEstimator, LIGHTNING_PARAMS)


TorchEstimator._model_class = TorchModel
