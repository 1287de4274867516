"""``fuse.spark.keras.KerasEstimator`` and ``KerasModel``: Horovod's Spark estimator for Keras
models (``horovod.spark.keras``), trained by fuse."""

from __future__ import annotations

from fuse.spark.common.estimator import FuseEstimator, FuseModel
from fuse.spark.common.params import declare

from . import remote

__all__ = ["KerasEstimator", "KerasModel"]

KERAS_ESTIMATOR_PARAMS = {
    "custom_objects": (None, "custom objects the model needs to load"),
    "checkpoint_callback": (None, "accepted for Horovod's signature; fuse checkpoints each epoch"),
    "input_shapes": (None, "shape of each feature column, aligned with feature_cols"),
    "backward_passes_per_step": (1, "gradients of this many batches add up before each "
                                    "allreduce and optimizer step"),
    "tensorflow_dataset_prefetch_buffer_size": (0, "accepted for Horovod's signature; unused"),
}

KERAS_MODEL_PARAMS = {
    "custom_objects": (None, "custom objects the model needs to load"),
    "input_shapes": (None, "shape of each feature column"),
}


class _SavesModelAsBytes:
    """Spark ML persistence with the Keras model saved as ``.keras`` bytes (Keras models do
    not pickle)."""

    def _values_to_save(self) -> dict:
        values = self.param_values()
        if values.get("model") is not None:
            values["model"] = remote.model_to_bytes(values["model"])
        return values

    def _values_loaded(self, values: dict) -> dict:
        if isinstance(values.get("model"), bytes):
            values["model"] = remote.model_from_bytes(values["model"],
                                                      values.get("custom_objects"))
        return values


class KerasEstimator(_SavesModelAsBytes, FuseEstimator):
    """Train a Keras model on a Spark DataFrame with fuse; ``fit(df)`` returns a
    :class:`KerasModel`.  Parameters as Horovod's KerasEstimator (see docs/guides/spark.md)."""

    def _check_params(self) -> None:
        import keras
        if not isinstance(self.getModel(), keras.Model):
            raise ValueError(f"model must be a keras.Model, got {type(self.getModel()).__name__}")
        if self.getOptimizer() is None:
            raise ValueError("optimizer is not set: give a keras optimizer")
        if self.getLoss() is None:
            raise ValueError("loss is not set: give a Keras loss (name or function)")
        self.check_input_shapes()

    def _input_shapes(self) -> dict | None:
        """Feature column -> shape: ``input_shapes``, else the model's inputs' shapes (as
        Horovod reshapes the features: a ``(None, 64)`` column into a model that takes
        ``(None, 8, 8, 1)``)."""
        shapes = self.getInputShapes() or remote.model_input_shapes(self.getModel())
        features = self.getFeatureCols() or []
        if not self.getInputShapes() and len(shapes) != len(features):
            return None     # a model whose inputs are not one per feature column: no reshape
        return dict(zip(features, shapes))

    def _shapes_list(self) -> list | None:
        shapes = self._input_shapes()
        return None if shapes is None else [shapes[c] for c in self.getFeatureCols()]

    def _framework_spec(self) -> dict:
        import keras
        optimizer = self.getOptimizer()
        if isinstance(optimizer, str):
            optimizer = keras.optimizers.get(optimizer)
        return {"model_bytes": remote.model_to_bytes(self.getModel()),
                "optimizer_config": keras.optimizers.serialize(optimizer),
                "custom_objects": self.getCustomObjects(), "loss": self.getLoss(),
                "loss_weights": self.getLossWeights(), "metrics": self.getMetrics(),
                "input_shapes": self._shapes_list(), "label_shapes": self.getLabelShapes(),
                "gradient_compression": self.getGradientCompression(),
                "backward_passes_per_step": self.getBackwardPassesPerStep(),
                "callbacks": self.getCallbacks()}

    def _remote_trainer(self):
        return remote.train

    def _create_model(self, result, run_id, data, df):
        model = remote.model_from_bytes(remote.model_to_bytes(self.getModel()),
                                        self.getCustomObjects())
        model.set_weights(result["weights"])
        return KerasModel(model=model, custom_objects=self.getCustomObjects(),
                          input_shapes=self._shapes_list(),
                          **self.model_fields(result, run_id, data))


class KerasModel(_SavesModelAsBytes, FuseModel):
    """A trained Keras model as a Spark ML ``Model``: ``transform(df)`` adds its outputs.
    The model travels (to executors, into saved files) as ``.keras`` bytes."""

    def _predict_fn(self):
        import numpy as np
        data = remote.model_to_bytes(self.getModel())
        custom = self.getCustomObjects()
        features = list(self.getFeatureColumns())
        shapes = dict(zip(features, self.getInputShapes() or []))
        loaded = {}

        def predict(arrays):
            if "model" not in loaded:
                loaded["model"] = remote.model_from_bytes(data, custom)
            inputs = remote.shaped_columns(arrays, features, shapes, columns_for_vectors=True)
            outputs = loaded["model"].predict_on_batch(inputs if len(inputs) > 1 else inputs[0])
            return [np.asarray(o) for o in (outputs if isinstance(outputs, (list, tuple))
                                            else [outputs])]

        return predict


declare(KerasEstimator, KERAS_ESTIMATOR_PARAMS)
declare(KerasModel, KERAS_MODEL_PARAMS)
