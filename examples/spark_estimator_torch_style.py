"""A Horovod Spark Estimator script: a classifier trained as a stage of a PySpark ML Pipeline.

Written as for Horovod; only the imports differ:
    import horovod.spark.torch as hvd_spark            ->  import fuse.spark.torch as hvd_spark
    from horovod.spark.common.store import Store       ->  from fuse.spark.common.store import Store

The data: two Gaussian blobs in 4 dimensions (class 0 around -1, class 1 around +1), assembled
into an ml Vector by a VectorAssembler stage; the model: a small MLP with two scores, trained
with cross-entropy; 20% of the rows are held out for validation.  The script prints the
history, saves and reloads the fitted PipelineModel, and fails unless its predictions on the
held-out rows are at least 95% right.

Run:  python examples/spark_estimator_torch_style.py --num-proc 2 --store /tmp/estimator-store
"""

import argparse
import sys
import tempfile

import numpy as np
import torch
from pyspark.ml import Pipeline, PipelineModel
from pyspark.ml.feature import VectorAssembler
from pyspark.sql import SparkSession

import fuse.spark.torch as hvd_spark
from fuse.spark.common.store import Store


def make_data(spark, rows, seed=7):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=rows)
    x = rng.normal(size=(rows, 4)) * 0.8 + (labels[:, None] * 2 - 1)
    data = [tuple(float(v) for v in row) + (int(label), bool(rng.random() < 0.2))
            for row, label in zip(x, labels)]
    return spark.createDataFrame(data, ["a", "b", "c", "d", "label", "held_out"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--store", default=None)
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()

    spark = (SparkSession.builder.master(args.master).appName("estimator example")
             .config("spark.ui.enabled", "false").getOrCreate())
    df = make_data(spark, 2000)
    store = Store.create(args.store or tempfile.mkdtemp(prefix="estimator-store-"))

    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    def accuracy(output, label):
        return (output.argmax(dim=1) == label).float().mean()

    estimator = hvd_spark.TorchEstimator(
        num_proc=args.num_proc, store=store, model=model, optimizer=optimizer,
        loss=torch.nn.functional.cross_entropy, metrics=[accuracy],
        input_shapes=[[-1, 4]], feature_cols=["features"], label_cols=["label"],
        validation="held_out", batch_size=32, epochs=args.epochs, random_seed=1, verbose=1)
    pipeline = Pipeline(stages=[VectorAssembler(inputCols=["a", "b", "c", "d"],
                                                outputCol="features"), estimator])
    fitted = pipeline.fit(df)
    torch_model = fitted.stages[-1]
    print("history:", {k: [round(v, 4) for v in vs] for k, vs in torch_model.getHistory().items()})

    path = tempfile.mkdtemp(prefix="estimator-model-")
    fitted.write().overwrite().save(path)
    loaded = PipelineModel.load(path)
    held_out = loaded.transform(df.where("held_out")).select("label", "label__output").collect()
    right = sum(int(np.argmax(row.label__output) == row.label) for row in held_out)
    share = right / len(held_out)
    print(f"held-out accuracy of the reloaded model: {share:.3f} ({right}/{len(held_out)})")
    spark.stop()
    return 0 if share >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
