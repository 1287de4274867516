"""fuse.spark.keras.KerasEstimator on a real local Spark (local[2]) in .venv-tf: learning known
weights with validation, transform, save/load, resuming a run, sample weights, a raising rank
and bad input.  The store, materialisation and reading are the torch estimator's
(tests/integrations/spark/test_spark_estimators.py tests them further)."""

import needs
import pytest

needs.module("tensorflow")
needs.module("pyspark", "spark")
needs.module("pyarrow", "spark")


import numpy as np  # noqa: E402

pytestmark = pytest.mark.timeout(900)   # a hang guard: fits are slow on a loaded 2-core machine
WEIGHTS, BIAS = [2.0, -3.0], 0.5


@pytest.fixture(scope="module")
def spark():
    from spark_util import local_spark
    with local_spark("local[2]") as session:
        yield session


@pytest.fixture(scope="module")
def df(spark):
    from pyspark.ml.linalg import Vectors
    rng = np.random.default_rng(0)
    rows = []
    for i in range(192):
        x = rng.uniform(-1, 1, size=2)
        noise = i % 4 == 0          # weight 0: its label comes from another function
        y = x @ np.array([-5.0, 4.0]) if noise else x @ np.array(WEIGHTS) + BIAS
        rows.append((Vectors.dense(x), float(y), 0.0 if noise else 1.0, i % 5 == 1))
    return spark.createDataFrame(rows, ["features", "label", "weight", "is_val"])


def _estimator(store, **kwargs):
    import keras

    from fuse.spark.keras import KerasEstimator
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input(shape=(2,)), keras.layers.Dense(1)])
    settings = dict(num_proc=2, model=model, store=store,
                    optimizer=keras.optimizers.SGD(learning_rate=0.5), loss="mse",
                    feature_cols=["features"], label_cols=["label"],
                    sample_weight_col="weight", validation="is_val", input_shapes=[[-1, 2]],
                    batch_size=16, epochs=8, random_seed=1, verbose=0,
                    partitions_per_process=1)
    settings.update(kwargs)
    return KerasEstimator(**settings)


def test_learns_transforms_saves_and_resumes(spark, df, tmp_path):
    from fuse.spark.common.store import LocalStore
    from fuse.spark.keras import KerasModel
    store = LocalStore(str(tmp_path / "store"))
    fitted = _estimator(store, epochs=4, run_id="keras").fit(df)
    first = fitted.getHistory()
    assert len(first["loss"]) == 4 and len(first["val_loss"]) == 4

    fitted = _estimator(store, epochs=8, run_id="keras").fit(df)     # goes on from epoch 4
    history = fitted.getHistory()
    assert len(history["loss"]) == 8 and history["loss"][:4] == first["loss"]
    kernel, bias = fitted.getModel().get_weights()
    assert kernel.reshape(-1).tolist() == pytest.approx(WEIGHTS, abs=0.1)
    assert float(bias[0]) == pytest.approx(BIAS, abs=0.1)

    clean = df.where("weight > 0")
    rows = fitted.transform(clean).select("label", "label__output").collect()
    assert np.allclose([r.label__output for r in rows], [r.label for r in rows], atol=0.2)
    path = str(tmp_path / "model")
    fitted.write().overwrite().save(path)
    loaded = KerasModel.load(path)
    again = loaded.transform(clean).select("label__output").collect()
    assert [r.label__output for r in again] == pytest.approx([r.label__output for r in rows])


def test_raising_rank_and_bad_input(spark, df, tmp_path):
    import keras

    from fuse.spark.common.store import LocalStore
    store = LocalStore(str(tmp_path / "store"))

    class FailOnRankOne(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            import fuse
            if fuse.rank() == 1:
                raise ValueError("rank one refuses this batch")

    with pytest.raises(ValueError, match="rank one refuses this batch"):
        _estimator(store, callbacks=[FailOnRankOne()], epochs=1).fit(df)
    with pytest.raises(ValueError, match=r"column 'features' has 2 value\(s\) per row"):
        _estimator(store, input_shapes=[[-1, 5]]).fit(df)
    with pytest.raises(ValueError, match="num_proc=4 is more than"):
        _estimator(store, num_proc=4).fit(df)
