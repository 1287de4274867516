"""``fuse.spark.lightning.TorchEstimator`` and ``TorchModel``: Horovod's Spark estimator for
PyTorch Lightning (``horovod.spark.lightning``).

Each rank runs a Lightning ``Trainer`` with fuse's strategy (``fuse.lightning``) on its shard
of the data (:mod:`fuse.spark.lightning.remote`), so the module's own hooks, ``self.log``, the
user's ``callbacks`` (``ModelCheckpoint``, ``LearningRateMonitor``, ...), ``logger``,
``profiler`` and ``trainer_args`` work as they do in any Lightning script.  A batch is a dict
column name -> tensor: features shaped by ``input_shapes``, scalar columns of shape (batch,).

The model is a ``LightningModule`` (of ``lightning.pytorch`` or ``pytorch_lightning``), or, in
Horovod's legacy form, a plain ``torch.nn.Module`` with ``optimizer`` and ``loss`` set, which
the ranks train as a LightningModule made around it (:mod:`fuse.spark.lightning.legacy`).
"""

from __future__ import annotations

from fuse.spark.common.params import declare
from fuse.spark.torch.estimator import TorchEstimator as _TorchEstimator
from fuse.spark.torch.estimator import TorchModel as _TorchModel
from fuse.spark.torch.remote import loss_functions

from . import remote

__all__ = ["TorchEstimator", "TorchModel"]

LIGHTNING_PARAMS = {
    "trainer_args": (None, "more keyword arguments of the ranks' Lightning Trainer (over "
                           "the estimator's own)"),
    "num_gpus": (None, "accepted for Horovod's signature; each rank uses one GPU when "
                       "use_gpu and CUDA has one, else the CPU"),
    "logger": (None, "the Trainer's logger (default: Lightning's, writing into the store's "
                     "logs path for the run)"),
    "log_every_n_steps": (50, "the Trainer's log_every_n_steps"),
    "loader_num_epochs": (None, "accepted for Horovod's signature; unused"),
    "terminate_on_nan": (False, "stop training when the loss is NaN or infinite"),
    "profiler": (None, "the Trainer's profiler"),
    "debug_data_loader": (False, "accepted for Horovod's signature; unused"),
    "train_async_data_loader_queue_size": (None, "accepted for Horovod's signature; unused"),
    "val_async_data_loader_queue_size": (None, "accepted for Horovod's signature; unused"),
}


class TorchEstimator(_TorchEstimator):
    """Train a ``LightningModule`` (or a ``torch.nn.Module`` with ``optimizer`` and ``loss``)
    on a Spark DataFrame with fuse (see the module's docstring)."""

    def _is_legacy(self) -> bool:
        """Horovod's legacy form: a plain torch module, trained with optimizer and loss."""
        import torch
        model = self.getModel()
        return isinstance(model, torch.nn.Module) and \
            not callable(getattr(model, "training_step", None))

    def _check_params(self) -> None:
        if self._is_legacy():
            super()._check_params()         # the torch estimator's checks: optimizer, loss
            return
        model = self.getModel()
        remote.lightning_package(model)
        if not callable(getattr(model, "configure_optimizers", None)):
            raise ValueError(f"model {type(model).__name__} has no configure_optimizers()")
        self.check_input_shapes()

    def _framework_spec(self) -> dict:
        legacy = None
        if self._is_legacy():
            labels = list(self.getLabelCols())
            legacy = {"optimizer": self.getOptimizer(),
                      "loss_fns": loss_functions(self.getLoss(), self.getLossConstructors(),
                                                 len(labels)),
                      "loss_weights": self.getLossWeights(),
                      "feature_cols": list(self.getFeatureCols()), "label_cols": labels,
                      "sample_weights_col": self.getSampleWeightCol(),
                      "metrics": self.getMetrics()}
        package = ("lightning.pytorch" if legacy is not None
                   else remote.lightning_package(self.getModel()))
        return {"model": self.getModel(), "legacy": legacy, "package": package,
                "input_shapes": self.getInputShapes(), "label_shapes": self.getLabelShapes(),
                "callbacks": self.getCallbacks(), "trainer_args": self.getTrainerArgs(),
                "logger": self.getLogger(), "log_every_n_steps": self.getLogEveryNSteps(),
                "profiler": self.getProfiler(), "terminate_on_nan": self.getTerminateOnNan(),
                "use_gpu": self.getUseGpu()}

    def _remote_trainer(self):
        return remote.train

    def _create_model(self, result, run_id, data, df):
        return TorchModel(model=self.trained_module(result), input_shapes=self.getInputShapes(),
                          **self.model_fields(result, run_id, data))


class TorchModel(_TorchModel):
    """A trained LightningModule as a Spark ML ``Model`` (``transform`` calls its forward
    with the feature columns as training gave them: a scalar column of shape (n,))."""

    _scalars_as_columns = False


declare(TorchEstimator, LIGHTNING_PARAMS)
