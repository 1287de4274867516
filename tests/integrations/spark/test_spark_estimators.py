"""fuse.spark.torch.TorchEstimator on a real local Spark (local[2], one JVM for the module):
learning known weights, transform, Spark ML persistence, a Pipeline stage, resuming a run,
validation by fraction and by column, sample weights, a raising rank, and bad input."""

import numpy as np
import pytest

import needs

needs.module("pyspark", "spark")
needs.module("torch")
needs.module("pyarrow", "spark")

import torch  # noqa: E402

import workers_spark_models  # noqa: E402
from fuse.spark.common.store import LocalStore  # noqa: E402
from fuse.spark.torch import TorchEstimator, TorchModel  # noqa: E402

pytestmark = pytest.mark.timeout(900)   # a hang guard: fits are slow on a loaded 2-core machine
WEIGHTS, BIAS = [2.0, -3.0], 0.5


def _linear_rows(n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, 2))
    y = x @ np.array(WEIGHTS) + BIAS
    return x, y


@pytest.fixture(scope="module")
def vector_df(spark):
    from pyspark.ml.linalg import Vectors
    x, y = _linear_rows(256)
    return spark.createDataFrame([(Vectors.dense(a), float(b)) for a, b in zip(x, y)],
                                 ["features", "label"])


def _estimator(store, **kwargs):
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    settings = dict(num_proc=2, model=model, store=store,
                    optimizer=torch.optim.SGD(model.parameters(), lr=0.2),
                    loss=torch.nn.functional.mse_loss, feature_cols=["features"],
                    label_cols=["label"], input_shapes=[[-1, 2]], batch_size=16, epochs=15,
                    random_seed=1, verbose=0, partitions_per_process=1)
    settings.update(kwargs)
    return TorchEstimator(**settings)


def _learned(model):
    return model.weight.detach().reshape(-1).tolist(), float(model.bias.detach()[0])


def test_learns_known_weights_transforms_and_round_trips(spark, vector_df, tmp_path):
    store = LocalStore(str(tmp_path / "store"))
    fitted = _estimator(store, validation=0.25).fit(vector_df)
    assert isinstance(fitted, TorchModel)
    weights, bias = _learned(fitted.getModel())
    assert weights == pytest.approx(WEIGHTS, abs=0.05) and bias == pytest.approx(BIAS, abs=0.05)
    history = fitted.getHistory()
    assert len(history["loss"]) == 15 and len(history["val_loss"]) == 15
    assert history["val_loss"][-1] < 0.01 < history["val_loss"][0]
    assert store.exists(store.get_checkpoint_path(fitted.getRunId()))

    out = fitted.setOutputCols(["prediction"]).transform(vector_df)
    rows = out.select("label", "prediction").collect()
    assert len(rows) == 256
    assert np.allclose([r.prediction for r in rows], [r.label for r in rows], atol=0.1)

    path = str(tmp_path / "model")
    fitted.write().overwrite().save(path)
    loaded = TorchModel.load(path)
    assert loaded.uid == fitted.uid and loaded.getHistory() == history
    assert _learned(loaded.getModel()) == _learned(fitted.getModel())
    again = loaded.transform(vector_df).select("prediction").collect()
    assert [r.prediction for r in again] == [r.prediction for r in rows]


def test_pipeline_stage_saved_and_resumed_by_run_id(spark, tmp_path):
    from pyspark.ml import Pipeline, PipelineModel
    from pyspark.ml.feature import VectorAssembler
    x, y = _linear_rows(128, seed=3)
    df = spark.createDataFrame([(float(a), float(b), float(c)) for (a, b), c in zip(x, y)],
                               ["x1", "x2", "label"])
    store = LocalStore(str(tmp_path / "store"))
    stages = [VectorAssembler(inputCols=["x1", "x2"], outputCol="features"),
              _estimator(store, epochs=2, run_id="resumed")]
    fitted = Pipeline(stages=stages).fit(df)
    first = fitted.stages[-1].getHistory()["loss"]
    assert len(first) == 2

    path = str(tmp_path / "pipeline")
    fitted.write().overwrite().save(path)
    loaded = PipelineModel.load(path)
    assert isinstance(loaded.stages[-1], TorchModel)
    predictions = loaded.transform(df).select("label__output").collect()
    expected = fitted.transform(df).select("label__output").collect()
    assert predictions == expected

    # the same run_id with more epochs goes on from the checkpoint of epoch 2
    resumed = Pipeline(stages=[stages[0], _estimator(store, epochs=4, run_id="resumed")]).fit(df)
    history = resumed.stages[-1].getHistory()["loss"]
    assert len(history) == 4 and history[:2] == first
    assert history[3] < first[1]


def test_validation_column_sample_weights_and_scalar_columns(spark, tmp_path):
    rng = np.random.default_rng(5)
    rows = []
    for i in range(192):
        x1, x2 = rng.uniform(-1, 1, size=2)
        noise = i % 3 == 0          # weight 0: its label comes from another function
        label = -4.0 * x1 + 7.0 * x2 if noise else 2.0 * x1 - 3.0 * x2 + 0.5
        rows.append((float(x1), float(x2), float(label), 0.0 if noise else 1.0, i % 4 == 1))
    df = spark.createDataFrame(rows, ["x1", "x2", "y", "weight", "is_val"])
    torch.manual_seed(0)
    model = workers_spark_models.TwoInputs()
    fitted = TorchEstimator(
        num_proc=2, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
        loss=torch.nn.MSELoss(), feature_cols=["x1", "x2"], label_cols=["y"],
        sample_weight_col="weight", validation="is_val", batch_size=8, epochs=20,
        store=LocalStore(str(tmp_path / "store")), random_seed=2, verbose=0,
        partitions_per_process=1,
        metrics=[torch.nn.functional.l1_loss]).fit(df)
    weights, bias = _learned(fitted.getModel().linear)
    assert weights == pytest.approx(WEIGHTS, abs=0.1) and bias == pytest.approx(BIAS, abs=0.1)
    history = fitted.getHistory()
    assert set(history) == {"loss", "l1_loss", "val_loss", "val_l1_loss"}
    # the validation rows (weighted the same way) are not trained on, yet are fitted well
    assert history["val_loss"][-1] < 0.02


def test_a_raising_rank_fails_fit_with_its_exception(spark, vector_df, tmp_path):
    model = workers_spark_models.RaisesOnRankOne()
    estimator = _estimator(LocalStore(str(tmp_path / "store")), model=model, epochs=1,
                           optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(ValueError, match="rank one cannot take this batch"):
        estimator.fit(vector_df)


@pytest.mark.parametrize("case, error, match", [
    ("missing column", ValueError, r"'nope'.*not in the DataFrame"),
    ("shape", ValueError, r"column 'features' has 2 value\(s\) per row.*\[-1, 3\]"),
    ("non-numeric", TypeError, r"column 'name' holds string"),
    ("num_proc", ValueError, r"num_proc=3 is more than this Spark cluster can run"),
    ("empty", ValueError, r"DataFrame is empty"),
])
def test_bad_input_is_refused_before_training(spark, vector_df, tmp_path, case, error, match):
    from pyspark.sql import functions as F
    store = LocalStore(str(tmp_path / "store"))
    df, settings = vector_df, {}
    if case == "missing column":
        settings = {"label_cols": ["nope"]}
    elif case == "shape":
        settings = {"input_shapes": [[-1, 3]]}
    elif case == "non-numeric":
        df = vector_df.withColumn("name", F.lit("a"))
        settings = {"label_cols": ["name"]}
    elif case == "num_proc":
        settings = {"num_proc": 3}
    else:
        df = vector_df.limit(0)
    with pytest.raises(error, match=match):
        _estimator(store, **settings).fit(df)
    assert not store.exists(store.get_runs_path()), "training started"


def test_lightning_module_learns_with_its_own_steps(spark, vector_df, tmp_path):
    needs.module("lightning")
    import workers_spark_lightning_models
    from pyspark import cloudpickle as spark_pickle
    # transform unpickles the model in Spark's Python workers, whose path lacks this folder
    spark_pickle.register_pickle_by_value(workers_spark_lightning_models)
    from fuse.spark.lightning import TorchEstimator as LightningEstimator
    from fuse.spark.lightning import TorchModel as LightningModel
    torch.manual_seed(0)
    fitted = LightningEstimator(
        num_proc=2, model=workers_spark_lightning_models.LinearRegression(),
        store=LocalStore(str(tmp_path / "store")), feature_cols=["features"],
        label_cols=["label"], input_shapes=[[-1, 2]], label_shapes=[[-1, 1]],
        validation=0.25, batch_size=16, epochs=15, random_seed=1, verbose=0,
        partitions_per_process=1).fit(vector_df)
    assert isinstance(fitted, LightningModel)
    weights, bias = _learned(fitted.getModel().linear)
    assert weights == pytest.approx(WEIGHTS, abs=0.05) and bias == pytest.approx(BIAS, abs=0.05)
    assert len(fitted.getHistory()["val_loss"]) == 15
    rows = fitted.transform(vector_df).select("label", "label__output").collect()
    assert np.allclose([r.label__output for r in rows], [r.label for r in rows], atol=0.1)
