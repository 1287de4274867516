"""A Horovod-style MXNet Gluon training script (synthetic MNIST-shaped data, small CNN).

Written exactly as for Horovod; only the import differs:
    import horovod.mxnet as hvd   ->   import fuse.mxnet as hvd

Run (in the MXNet environment, e.g. .venv-mxnet from scripts/test_mxnet.sh):
    fuserun -np 2 python examples/mxnet_gluon_style.py --epochs 2
"""

import argparse

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import fuse.mxnet as hvd


def conv_net():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(8, kernel_size=5, activation="relu"),
            gluon.nn.MaxPool2D(2),
            gluon.nn.Conv2D(16, kernel_size=5, activation="relu"),
            gluon.nn.MaxPool2D(2),
            gluon.nn.Flatten(),
            gluon.nn.Dense(32, activation="relu"),
            gluon.nn.Dense(10))
    return net


def synthetic_dataset(n, seed, rank=0, size=1):
    """Images of noise with a bright horizontal stripe whose row gives the class; this
    worker's part of them (every size-th sample)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n)
    images = rng.standard_normal((n, 1, 28, 28)).astype(np.float32) * 0.3
    images[np.arange(n), 0, labels * 2 + 4, 4:24] += 3.0
    return gluon.data.ArrayDataset(mx.nd.array(images[rank::size]),
                                   mx.nd.array(labels[rank::size], dtype="float32"))


def evaluate(model, loader, context):
    metric = mx.metric.Accuracy()
    for data, label in loader:
        output = model(data.as_in_context(context))
        metric.update([label.as_in_context(context)], [output])
    return metric.get()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--fp16-allreduce", action="store_true")
    args = parser.parse_args()

    hvd.init()
    context = mx.cpu(hvd.local_rank())
    mx.random.seed(42 + hvd.rank())     # different initial weights: the broadcast fixes them
    np.random.seed(hvd.rank())          # the DataLoader shuffles with NumPy's global generator

    # Horovod: each worker trains on its own shard of the data
    train_data = gluon.data.DataLoader(synthetic_dataset(1024, 1, hvd.rank(), hvd.size()),
                                       batch_size=args.batch_size, shuffle=True)
    test_data = gluon.data.DataLoader(synthetic_dataset(256, 2),
                                      batch_size=args.batch_size)

    model = conv_net()
    model.hybridize()
    model.initialize(mx.init.Xavier(magnitude=2.24), ctx=context)

    # Horovod: scale the learning rate by the number of workers
    optimizer = mx.optimizer.create("sgd", learning_rate=args.lr * hvd.size(), momentum=0.9)

    # Horovod: the parameters are initialised at the first forward (shapes are inferred), so
    # broadcast_parameters broadcasts them from rank 0 as soon as they exist
    params = model.collect_params()
    hvd.broadcast_parameters(params, root_rank=0)

    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    trainer = hvd.DistributedTrainer(params, optimizer, compression=compression)

    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    metric = mx.metric.Accuracy()
    for epoch in range(args.epochs):
        metric.reset()
        for data, label in train_data:
            data, label = data.as_in_context(context), label.as_in_context(context)
            with autograd.record():
                output = model(data)
                loss = loss_fn(output, label)
            loss.backward()
            trainer.step(args.batch_size)
            metric.update([label], [output])
        name, train_acc = metric.get()
        # Horovod: average the metric over the workers
        train_acc = hvd.allreduce(mx.nd.array([train_acc]), name=f"train_acc.{epoch}")
        if hvd.rank() == 0:
            print(f"epoch {epoch} training {name} {train_acc.asscalar():.3f}", flush=True)

    _, test_acc = evaluate(model, test_data, context)
    checksum = sum(float(p.data().sum().asscalar()) for p in params.values())
    print(f"rank {hvd.rank()} final accuracy {test_acc:.4f} checksum {checksum:.6f}",
          flush=True)


if __name__ == "__main__":
    main()
