"""``fuse.spark.torch.TorchEstimator`` and ``TorchModel``: Horovod's Spark estimator for
PyTorch models (``horovod.spark.torch``), trained by fuse."""

from __future__ import annotations

import copy

from fuse.spark.common.estimator import FuseEstimator, FuseModel
from fuse.spark.common.params import declare

from . import remote

__all__ = ["TorchEstimator", "TorchModel"]

TORCH_ESTIMATOR_PARAMS = {
    "input_shapes": (None, "shape of each feature column, aligned with feature_cols "
                           "(first dimension -1: the batch)"),
    "loss_constructors": (None, "functions that each return a loss function"),
    "train_minibatch_fn": (None, "fn(model, optimizer, batch) -> (loss, metrics dict) "
                                 "replacing the default step's forward pass and loss"),
    "backward_passes_per_step": (1, "backward passes whose gradients add up before each "
                                    "allreduce and optimizer step"),
}

TORCH_MODEL_PARAMS = {
    "optimizer": (None, "the trained optimizer (its state after training)"),
    "input_shapes": (None, "shape of each feature column"),
}


class TorchEstimator(FuseEstimator):
    """Train a ``torch.nn.Module`` on a Spark DataFrame with fuse; ``fit(df)`` returns a
    :class:`TorchModel`.  Parameters as Horovod's TorchEstimator (see docs/guides/spark.md)."""

    def _check_params(self) -> None:
        import torch
        model = self.getModel()
        if not isinstance(model, torch.nn.Module):
            raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(self.getOptimizer(), torch.optim.Optimizer):
            raise ValueError("optimizer must be a torch.optim.Optimizer (made on the model's "
                             f"parameters), got {type(self.getOptimizer()).__name__}")
        if self.getLoss() is None and not self.getLossConstructors() \
                and self.getTrainMinibatchFn() is None:
            raise ValueError("loss is not set: give a loss function (e.g. "
                             "torch.nn.functional.mse_loss) or loss_constructors")
        self.check_input_shapes()

    def _framework_spec(self) -> dict:
        return {"model": self.getModel(), "optimizer": self.getOptimizer(),
                "loss": self.getLoss(), "loss_constructors": self.getLossConstructors(),
                "loss_weights": self.getLossWeights(), "metrics": self.getMetrics(),
                "input_shapes": self.getInputShapes(), "label_shapes": self.getLabelShapes(),
                "gradient_compression": self.getGradientCompression(),
                "backward_passes_per_step": self.getBackwardPassesPerStep(),
                "train_minibatch_fn": self.getTrainMinibatchFn(),
                "callbacks": self.getCallbacks()}

    def _remote_trainer(self):
        return remote.train

    def trained_module(self, result):
        """A copy of the model with the trained weights, in eval mode."""
        model = copy.deepcopy(self.getModel())
        model.load_state_dict(result["model"])
        model.eval()
        return model

    def _create_model(self, result, run_id, data, df):
        model = self.trained_module(result)
        optimizer = remote.optimizer_for(model, self.getOptimizer())
        optimizer.load_state_dict(result["optimizer"])
        return TorchModel(model=model, optimizer=optimizer, input_shapes=self.getInputShapes(),
                          **self.model_fields(result, run_id, data))


class TorchModel(FuseModel):
    """A trained torch model as a Spark ML ``Model``: ``transform(df)`` adds its outputs."""

    _scalars_as_columns = True      # a scalar feature as the model saw it in training: (n, 1)

    def _predict_fn(self):
        import torch
        model = self.getModel()
        features = list(self.getFeatureColumns())
        shapes = dict(zip(features, self.getInputShapes() or []))
        metadata = self.getOrDefault(self._metadata) or {}
        scalars_as_columns = self._scalars_as_columns

        def predict(arrays):
            with torch.no_grad():
                model.eval()
                outputs = model(*remote.batch_tensors(arrays, features, shapes, metadata,
                                                      scalars_as_columns))
            outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
            return [o.detach().cpu().numpy() for o in outputs]

        return predict


declare(TorchEstimator, TORCH_ESTIMATOR_PARAMS)
declare(TorchModel, TORCH_MODEL_PARAMS)

