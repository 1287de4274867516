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
        self._check_input_shapes()

    def _framework_spec(self) -> dict:
        return {"model": self.getModel(), "optimizer": self.getOptimizer(),
                "loss": self.getLoss(), "loss_constructors": self.getLossConstructors(),
                "loss_weights": self.getLossWeights(), "metrics": self.getMetrics(),
                "input_shapes": self.getInputShapes(), "label_shapes": self.getLabelShapes(),
                "gradient_compression": self.getGradientCompression(),
                "backward_passes_per_step": self.getBackwardPassesPerStep(),
                "train_minibatch_fn": self.getTrainMinibatchFn(),
                "callbacks": self.getCallbacks(), "make_optimizer": None,
                "lightning_steps": None}

    def _remote_trainer(self):
        return remote.train

    def _optimizer_for(self, model):
        """The optimizer the trained model's state is loaded into."""
        return remote.optimizer_for(model, self.getOptimizer())

    _model_class: type = None       # set below: TorchModel (the Lightning estimator's own)

    def _create_model(self, result, run_id, data, df):
        model = copy.deepcopy(self.getModel())
        model.load_state_dict(result["model"])
        model.eval()
        optimizer = self._optimizer_for(model)
        optimizer.load_state_dict(result["optimizer"])
        return self._model_class(history=result["history"], model=model, optimizer=optimizer,
                          feature_columns=list(self.getFeatureCols()),
                          label_columns=list(self.getLabelCols()), run_id=run_id,
                          input_shapes=self.getInputShapes(), _metadata=data.columns)


class TorchModel(FuseModel):
    """A trained torch model as a Spark ML ``Model``: ``transform(df)`` adds its outputs."""

    def _predict_fn(self):
        import torch
        model = self.getModel()
        features = list(self.getFeatureColumns())
        shapes = dict(zip(features, self.getInputShapes() or []))
        metadata = self.getOrDefault(self._metadata) or {}

        def predict(arrays):
            with torch.no_grad():
                model.eval()
                outputs = model(*remote.batch_tensors(arrays, features, shapes, metadata))
            outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
            return [o.detach().cpu().numpy() for o in outputs]

        return predict


declare(TorchEstimator, TORCH_ESTIMATOR_PARAMS)
declare(TorchModel, TORCH_MODEL_PARAMS)


TorchEstimator._model_class = TorchModel
