"""What a Spark estimator's ``fit`` costs beyond the same training under ``fuserun``.

The data: ``--rows`` rows of 16 features (an ml Vector column) and a linear label; the model:
Linear(16, 1) with SGD, ``--epochs`` epochs of batches of 64 on 2 ranks.  Measured per round,
the sides alternating:

- ``fuserun``: ``fuserun -np 2 python <job>`` as a subprocess, wall time; each rank loads its
  half of the same rows from a ``.npy`` file and takes the same number of steps as fit does;
- ``fit``: ``TorchEstimator(...).fit(df)`` on a local[2] SparkSession started once beforehand
  (its start is reported apart), the DataFrame cached in Spark's memory beforehand;
- ``materialise``: the part of fit that writes the DataFrame to Parquet in the store (called
  alone, same arguments).

fit minus fuserun is what the estimator adds: materialisation, the Spark stage and its task
start, reading Parquet on the ranks, checkpointing, sending the model back.

Run: ``python bench/studies/spark_estimator.py [--rounds 3] [--rows 20000] [--epochs 3]``; writes
``bench/results/studies/spark_estimator.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
SUITE = os.path.join(BENCH, "suite")
sys.path.insert(0, SUITE)

from machine import describe as describe_machine  # noqa: E402

JOB = """
import math, sys
import numpy as np
import torch
import fuse.torch as hvd

hvd.init()
torch.set_num_threads(1)
torch.manual_seed(0)
data = np.load(sys.argv[1])
x, y = data[:, :-1].astype(np.float32), data[:, -1:].astype(np.float32)
mine = slice(hvd.rank(), None, hvd.size())
x, y = torch.from_numpy(x[mine].copy()), torch.from_numpy(y[mine].copy())
batch, epochs = int(sys.argv[2]), int(sys.argv[3])
steps = math.ceil(len(data) / (batch * hvd.size()))
model = torch.nn.Linear(x.shape[1], 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
for epoch in range(epochs):
    order = torch.randperm(len(x))
    losses = []
    for step in range(steps):
        idx = order[(step * batch) % len(x):][:batch]
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    hvd.allreduce(torch.tensor(sum(losses) / steps), name="epoch_loss")
"""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()

    import numpy as np
    import torch
    from pyspark.ml.linalg import Vectors
    from pyspark.sql import SparkSession

    from fuse.spark.common.dataset import materialise
    from fuse.spark.common.store import LocalStore
    from fuse.spark.torch import TorchEstimator

    workdir = tempfile.mkdtemp(prefix="bench-spark-estimator-")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.rows, 16))
    y = x @ rng.normal(size=16) + 0.1
    data_file = os.path.join(workdir, "data.npy")
    np.save(data_file, np.column_stack([x, y]))
    job = os.path.join(workdir, "job.py")
    with open(job, "w") as f:
        f.write(JOB)

    os.environ["PYSPARK_PYTHON"] = sys.executable
    started = time.perf_counter()
    spark = (SparkSession.builder.master("local[2]").appName("bench-spark-estimator")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.createDataFrame([(Vectors.dense(a), float(b)) for a, b in zip(x, y)],
                               ["features", "label"]).cache()
    df.count()
    spark_start = time.perf_counter() - started

    batch = 64
    times = {"fuserun": [], "fit": [], "materialise": []}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FUSE_", "HOROVOD_"))}
    for round_ in range(args.rounds):
        order = ["fuserun", "fit"] if round_ % 2 == 0 else ["fit", "fuserun"]
        for side in order:
            begin = time.perf_counter()
            if side == "fuserun":
                subprocess.run([sys.executable, "-m", "fuse.runner.launch", "-np", "2",
                                sys.executable, job, data_file, str(batch), str(args.epochs)],
                               check=True, env=env, capture_output=True)
            else:
                model = torch.nn.Linear(16, 1)
                store = LocalStore(os.path.join(workdir, f"store{round_}"))
                TorchEstimator(num_proc=2, store=store, model=model,
                               optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                               loss=torch.nn.functional.mse_loss, feature_cols=["features"],
                               label_cols=["label"], input_shapes=[[-1, 16]],
                               batch_size=batch, epochs=args.epochs, verbose=0).fit(df)
            times[side].append(time.perf_counter() - begin)
        begin = time.perf_counter()
        materialise(df, LocalStore(os.path.join(workdir, "alone")), f"m{round_}", ["features"],
                    ["label"], None, None, 2, 10, {"features": [-1, 16]}, None)
        times["materialise"].append(time.perf_counter() - begin)
    spark.stop()

    medians = {k: statistics.median(v) for k, v in times.items()}
    result = {"machine": describe_machine(), "rows": args.rows, "epochs": args.epochs,
              "batch_size": batch, "steps_per_epoch": math.ceil(args.rows / (batch * 2)),
              "spark_session_start_s": spark_start, "times_s": times, "medians_s": medians,
              "load_before": os.getloadavg()}
    os.makedirs(os.path.join(BENCH, "results", "studies"), exist_ok=True)
    with open(os.path.join(BENCH, "results", "studies", "spark_estimator.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(f"| side | median s ({args.rounds} rounds) |\n|---|---|")
    for side in ("fuserun", "fit", "materialise"):
        print(f"| {side} | {medians[side]:.2f} |")
    print(f"| fit - fuserun | {medians['fit'] - medians['fuserun']:.2f} |")
    print(f"SparkSession start (once): {spark_start:.1f} s; load: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
