"""A Horovod-on-Spark PyTorch script (synthetic regression data, a small MLP).

Written exactly as for Horovod; only the imports differ (and so the module the run is called on,
horovod.spark.run -> fuse.spark.run):
    import horovod.spark                  ->   import fuse.spark
    import horovod.torch as hvd           ->   import fuse.torch as hvd

Run:  python examples/spark_torch_style.py --num-proc 2     (a local Spark, local[2])
      python examples/spark_torch_style.py --master spark://head:7077 --num-proc 4
"""

import argparse
import sys

import torch
from pyspark.sql import SparkSession

import fuse.spark
import fuse.torch as hvd

def train_fn(epochs=3, lr=0.01):
    hvd.init()
    torch.manual_seed(hvd.rank())
    model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr * hvd.size(), momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    g = torch.Generator().manual_seed(100 + hvd.rank())      # this rank's shard
    x = torch.randn(256, 10, generator=g)
    y = x @ torch.linspace(-1, 1, 10).unsqueeze(1) + 0.5
    for epoch in range(epochs):
        for i in range(0, len(x), 32):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x[i:i + 32]), y[i:i + 32])
            loss.backward()
            optimizer.step()
        loss = hvd.allreduce(loss.detach(), name="loss").item()
        if hvd.rank() == 0:
            print(f"epoch {epoch}: loss {loss:.4f}", flush=True)
    checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
    return hvd.rank(), loss, checksum


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--master", default=None, help="default: local[NUM_PROC]")
    args = parser.parse_args()

    spark = (SparkSession.builder.appName("fuse-spark-example")
             .master(args.master or f"local[{args.num_proc}]").getOrCreate())
    results = fuse.spark.run(train_fn, kwargs=dict(epochs=args.epochs), num_proc=args.num_proc,
                             stdout=sys.stdout, stderr=sys.stderr, verbose=2,
                             prefix_output_with_timestamp=True)
    spark.stop()
    ranks = [r[0] for r in results]
    assert len({r[2] for r in results}) == 1, f"the replicas diverged: {results}"
    print(f"ranks {ranks} agree: final loss {results[0][1]:.4f}, weight checksum "
          f"{results[0][2]:.6f}")
