"""The Spark ML params of the estimators and models, with Horovod's names and defaults.

Each param gets Spark's getter and setter (``getBatchSize``/``setBatchSize`` for
``batch_size``), declared once in the tables below instead of by hand for each name.
"""

from __future__ import annotations

from pyspark.ml.param import Param, Params

__all__ = ["EstimatorParams", "ModelParams", "declare"]

# name -> (default, what it is).  A default of None means "unset" unless said otherwise.
ESTIMATOR_PARAMS = {
    "num_proc": (None, "number of ranks (Spark tasks); default: the cluster's task slots"),
    "model": (None, "the model to train"),
    "backend": (None, "accepted for Horovod's signature; fuse always trains through fuse.spark.run"),
    "store": (None, "the Store for materialised data, checkpoints and logs"),
    "metrics": ([], "metric functions metric(output, label) -> scalar tensor"),
    "loss": (None, "loss function(s), one per label column"),
    "loss_weights": (None, "weight of each label column's loss"),
    "sample_weight_col": (None, "column of per-row weights of the loss"),
    "gradient_compression": (None, "fuse Compression for the gradients"),
    "compress_sparse_cols": (False, "accepted for Horovod's signature; unused"),
    "optimizer": (None, "the optimizer (its class and settings are used)"),
    "feature_cols": (None, "feature column names, in the model's argument order"),
    "continuous_cols": (None, "accepted for Horovod's signature; unused"),
    "categorical_cols": (None, "accepted for Horovod's signature; unused"),
    "label_cols": (None, "label column names, one per model output"),
    "validation": (None, "fraction of rows (float in [0, 1)) or name of a boolean column"),
    "callbacks": ([], "callbacks (framework specific)"),
    "batch_size": (32, "rows per training step on each rank"),
    "val_batch_size": (None, "rows per validation step on each rank (default batch_size)"),
    "epochs": (1, "number of epochs"),
    "train_steps_per_epoch": (None, "steps per epoch (default: rows / (batch_size * num_proc))"),
    "validation_steps_per_epoch": (None, "validation steps per epoch (default: all rows)"),
    "shuffle_buffer_size": (None, "rows in each rank's shuffle buffer (default: its whole shard)"),
    "shuffle": (True, "whether to shuffle the training rows"),
    "verbose": (1, "verbosity"),
    "partitions_per_process": (10, "Parquet files per rank in the materialised data"),
    "run_id": (None, "the run's id in the store (default: a new one); fit resumes an existing run"),
    "transformation_fn": (None, "function applied to each batch (a dict of numpy arrays) when read"),
    "transformation_edit_fields": (None, "accepted for Horovod's signature; unused"),
    "transformation_removed_fields": (None, "accepted for Horovod's signature; unused"),
    "train_reader_num_workers": (2, "accepted for Horovod's signature; unused"),
    "val_reader_num_workers": (2, "accepted for Horovod's signature; unused"),
    "reader_pool_type": ("thread", "accepted for Horovod's signature; unused"),
    "label_shapes": (None, "shapes of the label columns (default: the outputs' shapes)"),
    "inmemory_cache_all": (False, "accepted for Horovod's signature; unused"),
    "use_gpu": (True, "accepted for Horovod's signature; the ranks use what fuse finds"),
    "mp_start_method": (None, "accepted for Horovod's signature; unused"),
    "backend_env": (None, "the ranks' extra environment variables"),
    "random_seed": (None, "seed of the validation split, the shuffle and torch"),
    "data_module": (None, "accepted for Horovod's signature; fuse reads with pyarrow.dataset"),
}

MODEL_PARAMS = {
    "history": (None, "the metrics of each epoch"),
    "model": (None, "the trained model"),
    "feature_columns": (None, "feature column names"),
    "label_columns": (None, "label column names"),
    "output_cols": (None, "output column names (default: <label>__output)"),
    "run_id": (None, "the run's id in the store"),
    "_metadata": (None, "the types and shapes of the training columns"),
}


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.lstrip("_").split("_"))


def declare(cls, table: dict) -> None:
    """Give ``cls`` a Param, a getter and a setter for each entry of ``table``."""
    for name, (_, doc) in table.items():
        setattr(cls, name, Param(Params._dummy(), name, doc))
        camel = _camel(name)

        def getter(self, _name=name):
            return self.getOrDefault(getattr(self, _name))

        def setter(self, value, _name=name):
            return self._set(**{_name: value})

        getter.__name__, setter.__name__ = f"get{camel}", f"set{camel}"
        setattr(cls, f"get{camel}", getter)
        setattr(cls, f"set{camel}", setter)
    cls._param_table = {**getattr(cls, "_param_table", {}), **table}


class _TableParams(Params):
    """Params from ``_param_table``, set from keyword arguments that must name one of them."""

    _param_table: dict = {}

    def _init_params(self, kwargs: dict) -> None:
        self._setDefault(**{name: default for name, (default, _) in self._param_table.items()})
        unknown = sorted(set(kwargs) - set(self._param_table))
        if unknown:
            raise TypeError(f"{type(self).__name__} has no parameter(s) {', '.join(unknown)}; "
                            f"it takes {', '.join(sorted(self._param_table))}")
        self._set(**kwargs)

    def setParams(self, **kwargs):
        self._init_params(kwargs)
        return self

    def param_values(self) -> dict:
        """Every param's value (defaults included), by name."""
        return {name: self.getOrDefault(getattr(self, name)) for name in self._param_table}


class EstimatorParams(_TableParams):
    pass


class ModelParams(_TableParams):
    pass


declare(EstimatorParams, ESTIMATOR_PARAMS)
declare(ModelParams, MODEL_PARAMS)
