"""What every fuse Spark estimator and model does whatever the framework: ``fit`` checks the
input, materialises it to the store and trains through :func:`fuse.spark.run`; ``transform``
runs the trained model over a DataFrame's partitions and adds one column per output.

A framework (``fuse.spark.torch``, ``.keras``, ``.lightning``) gives the training function
that runs on the ranks, and how a trained model predicts on a batch of numpy arrays.
"""

from __future__ import annotations

import os
import uuid

from pyspark.ml import Estimator, Model

from .dataset import check_num_proc, materialise
from .params import EstimatorParams, ModelParams
from .serialization import PersistenceMixin

__all__ = ["FuseEstimator", "FuseModel", "TrainingSpec"]

_PREDICT_BATCH = 256        # rows per model call in transform


class TrainingSpec:
    """Everything the ranks' training function gets (pickled once by fuse.spark.run)."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


class FuseEstimator(PersistenceMixin, Estimator, EstimatorParams):
    """The framework-independent part of ``fit``."""

    def __init__(self, **kwargs):
        super().__init__()
        self._init_params(kwargs)

    # what a framework gives
    def _check_params(self) -> None:
        raise NotImplementedError

    def _remote_trainer(self):
        """The function the ranks run: ``fn(spec) -> result`` (rank 0's result is used)."""
        raise NotImplementedError

    def _framework_spec(self) -> dict:
        return {}

    def _create_model(self, result, run_id: str, data, df):
        raise NotImplementedError

    def model_fields(self, result, run_id: str, data) -> dict:
        """The trained model's fields every framework sets alike: the history, the columns,
        the run and the data's column metadata."""
        return {"history": result["history"], "feature_columns": list(self.getFeatureCols()),
                "label_columns": list(self.getLabelCols()), "run_id": run_id,
                "_metadata": data.columns}

    def _input_shapes(self) -> dict | None:
        """Feature column -> the shape its values take (``input_shapes``), or None."""
        shapes = self.getInputShapes()
        return dict(zip(self.getFeatureCols() or [], shapes)) if shapes else None

    def check_input_shapes(self) -> None:
        shapes = self.getInputShapes()
        features = self.getFeatureCols() or []
        if shapes is not None and len(shapes) != len(features):
            raise ValueError(f"input_shapes has {len(shapes)} shape(s) for {len(features)} "
                             f"feature column(s) ({', '.join(features)})")

    def _fit(self, df):
        import fuse.spark

        self._check_params()
        store = self.getStore()
        if store is None:
            raise ValueError("store is not set: give the estimator a Store, e.g. "
                             "store=Store.create('/shared/path')")
        sc = df.sparkSession.sparkContext
        num_proc = check_num_proc(sc, self.getNumProc())
        batch_size = self.getBatchSize()
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        epochs = self.getEpochs()
        if not isinstance(epochs, int) or epochs < 0:
            raise ValueError(f"epochs must be a non-negative integer, got {epochs!r}")
        run_id = self.getRunId() or f"fuse_{uuid.uuid4().hex[:12]}"
        data = materialise(df, store, run_id, list(self.getFeatureCols() or []),
                           list(self.getLabelCols() or []), self.getSampleWeightCol(),
                           self.getValidation(), num_proc, self.getPartitionsPerProcess(),
                           self._input_shapes(), self.getRandomSeed())
        spec = TrainingSpec(
            store=store, run_id=run_id, data=data, num_proc=num_proc,
            feature_cols=list(self.getFeatureCols()), label_cols=list(self.getLabelCols()),
            sample_weight_col=self.getSampleWeightCol(), batch_size=batch_size,
            val_batch_size=self.getValBatchSize() or batch_size, epochs=epochs,
            train_steps_per_epoch=self.getTrainStepsPerEpoch(),
            validation_steps_per_epoch=self.getValidationStepsPerEpoch(),
            shuffle=self.getShuffle(), shuffle_buffer_size=self.getShuffleBufferSize(),
            random_seed=self.getRandomSeed(), transformation_fn=self.getTransformationFn(),
            verbose=self.getVerbose(), **self._framework_spec())
        env = None
        if self.getBackendEnv():
            env = {**os.environ, **{k: str(v) for k, v in self.getBackendEnv().items()}}
        results = fuse.spark.run(self._remote_trainer(), args=(spec,), num_proc=num_proc,
                                 env=env)
        return self._create_model(results[0], run_id, data, df)


class FuseModel(PersistenceMixin, Model, ModelParams):
    """The framework-independent part of a trained model: ``transform`` and the params."""

    def __init__(self, **kwargs):
        super().__init__()
        self._init_params(kwargs)

    def _predict_fn(self):
        """A picklable ``fn(features: dict name -> numpy array) -> list of numpy arrays``, one
        array per output, each with one row per input row."""
        raise NotImplementedError

    def getOutputCols(self):
        cols = self.getOrDefault(self.output_cols)
        return list(cols) if cols else [f"{c}__output" for c in self.getLabelColumns()]

    def _transform(self, df):
        from pyspark.ml.linalg import VectorUDT
        from pyspark.sql import types as T

        features = list(self.getFeatureColumns())
        missing = [c for c in features if c not in df.columns]
        if missing:
            raise ValueError(f"column(s) {', '.join(map(repr, missing))} are not in the "
                             f"DataFrame (it has {', '.join(df.columns)})")
        outputs = self.getOutputCols()
        clash = [c for c in outputs if c in df.columns]
        if clash:
            raise ValueError(f"output column(s) {', '.join(map(repr, clash))} are in the "
                             "DataFrame already: choose others with setOutputCols")
        predict = self._predict_fn()
        metadata = self.getOrDefault(self._metadata) or {}
        label_kinds = [metadata[c].kind if c in metadata else "scalar"
                       for c in self.getLabelColumns()]
        first = df.select(*features).head(1)
        sizes = ([a.reshape(len(a), -1).shape[1] for a in predict(_arrays(first, features))]
                 if first else [1] * len(outputs))
        if len(sizes) != len(outputs):
            raise ValueError(f"the model has {len(sizes)} output(s) but {len(outputs)} output "
                             f"column(s) are set ({', '.join(outputs)})")
        kinds = [_output_kind(k, size) for k, size in zip(label_kinds, sizes)]
        types = {"scalar": T.DoubleType(), "vector": VectorUDT(),
                 "array": T.ArrayType(T.DoubleType())}
        schema = T.StructType(df.schema.fields +
                              [T.StructField(c, types[k], True) for c, k in zip(outputs, kinds)])
        names = df.columns
        positions = [names.index(c) for c in features]

        def partition(rows):
            batch = []
            for row in rows:
                batch.append(row)
                if len(batch) == _PREDICT_BATCH:
                    yield from _predict_rows(batch, positions, features, predict, kinds)
                    batch = []
            if batch:
                yield from _predict_rows(batch, positions, features, predict, kinds)

        return df.sparkSession.createDataFrame(df.rdd.mapPartitions(partition), schema)


def _output_kind(label_kind: str, size: int) -> str:
    """How an output column holds a prediction of ``size`` values for a label of
    ``label_kind``: a vector label's as an ml Vector; an array label's as an array; a scalar
    label's as a double, or as an ml Vector when the model gives several values per row (a
    classifier's scores), as Spark ML's own classifiers give them."""
    if label_kind == "vector":
        return "vector"
    if size == 1:
        return "scalar"
    return "array" if label_kind == "array" else "vector"


def _column_array(values):
    import numpy as np
    from pyspark.ml.linalg import Vector
    if values and isinstance(values[0], Vector):
        return np.stack([v.toArray() for v in values])
    return np.asarray(values)


def _arrays(rows, features: list[str]) -> dict:
    return {c: _column_array([r[c] for r in rows]) for c in features}


def _predict_rows(batch, positions, features, predict, kinds):
    from pyspark.ml.linalg import DenseVector
    arrays = {c: _column_array([r[p] for r in batch]) for c, p in zip(features, positions)}
    outs = [o.reshape(len(batch), -1) for o in predict(arrays)]
    for i, row in enumerate(batch):
        extra = []
        for out, kind in zip(outs, kinds):
            values = out[i]
            if kind == "scalar":
                extra.append(float(values[0]))
            elif kind == "vector":
                extra.append(DenseVector(values.astype(float)))
            else:
                extra.append([float(v) for v in values])
        yield tuple(row) + tuple(extra)
