"""One side of bench/suite/mxnet_step.py: an MXNet Gluon training step on 2 workers.

    fuserun -np 2 .venv-mxnet/bin/python bench/suite/mxnet_worker.py --side fuse --json f
    horovodrun -np 2 --gloo .venv-horovod-mxnet/bin/python bench/suite/mxnet_worker.py \
        --side horovod --json f

``--side fuse`` imports ``fuse.mxnet`` and ``--side horovod`` ``horovod.mxnet``; nothing else
differs: the same Gluon model, hybridized, the same batch, ``DistributedTrainer`` with SGD
(momentum 0.9), the parameters broadcast from rank 0 before the first step.  Neither side
imports the other's package, so the fuse side runs where Horovod is not installed.

Models (``--models``): ``dense``, four 2560x2560 Dense layers and a 10-way head (26.3 M
parameters in 10 tensors, gradient-heavy: little compute per parameter); ``resnet50``, Gluon's
model-zoo ``resnet50_v1`` (25.6 M trainable parameters in 161 tensors) on 32x32 inputs, so the
parameter set is ResNet-50's and the compute small.  A step: forward and backward under
``autograd.record``, ``trainer.step`` (the gradients averaged over the workers, then SGD),
then ``mx.nd.waitall()`` so that the step's time includes all the work MXNet's asynchronous
engine was given (Horovod's collectives run on that engine, fuse's return when done).

The thread budget and MXNet's settings are the launcher's environment (``OMP_NUM_THREADS``,
``MXNET_ENGINE_TYPE``, ``MXNET_CPU_WORKER_NTHREADS``, ``MXNET_MKLDNN_ENABLED``), set the same
for both sides by mxnet_step.py; rank 0 writes the
step times and the values it ran with.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

BATCH = 16              # samples per worker and step
DENSE_WIDTH = 2560
DENSE_LAYERS = 4
IMAGE = 32
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MXNET_ENGINE_TYPE", "MXNET_CPU_WORKER_NTHREADS",
                    "MXNET_MKLDNN_ENABLED")


def build_model(name: str, size: str):
    """The Gluon network (initialised, hybridized) and one worker's fixed batch."""
    import mxnet as mx
    from mxnet.gluon import nn
    mx.random.seed(0)     # the same batch on every rank and every run
    if name == "dense":
        width = DENSE_WIDTH if size == "full" else 64
        net = nn.HybridSequential()
        for _ in range(DENSE_LAYERS):
            net.add(nn.Dense(width, activation="relu", in_units=width))
        net.add(nn.Dense(10, in_units=width))
        x = mx.nd.random.normal(shape=(BATCH, width))
    elif name == "resnet50":
        if size == "full":
            net = mx.gluon.model_zoo.vision.resnet50_v1(classes=1000)
        else:   # the test's tiny stand-in: same code path, a few thousand parameters
            net = nn.HybridSequential()
            net.add(nn.Conv2D(8, 3, strides=4), nn.BatchNorm(), nn.GlobalAvgPool2D(),
                    nn.Dense(10))
        x = mx.nd.random.normal(shape=(BATCH, 3, IMAGE, IMAGE))
    else:
        raise ValueError(f"unknown model {name!r}: dense or resnet50")
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(x).wait_to_read()       # deferred shapes known, so the parameters can be broadcast
    y = mx.nd.array(mx.nd.random.randint(0, 10, shape=(BATCH,)).asnumpy())
    return net, x, y


def package_version(side: str) -> str:
    from importlib import metadata
    dist = "fuse-dl" if side == "fuse" else "horovod"
    try:
        return f"{dist} {metadata.version(dist)}"
    except metadata.PackageNotFoundError:
        return dist


def trainable(net) -> list:
    return [p for p in net.collect_params().values() if p.grad_req != "null"]


def make_step(hvd, net, x, y):
    import mxnet as mx
    params = net.collect_params()
    hvd.broadcast_parameters(params, root_rank=0)
    trainer = hvd.DistributedTrainer(params, "sgd",
                                     {"learning_rate": 1e-4, "momentum": 0.9})
    loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()

    def step():
        with mx.autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(BATCH)
        mx.nd.waitall()
    return step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--side", choices=("fuse", "horovod"), required=True)
    ap.add_argument("--models", default="dense,resnet50")
    ap.add_argument("--size", choices=("full", "tiny"), default="full",
                    help="tiny: small stand-ins for the models (the workload's test)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import mxnet as mx
    if args.side == "fuse":
        import fuse.mxnet as hvd
    else:
        import horovod.mxnet as hvd
    hvd.init()
    one = mx.nd.ones((1,))

    def barrier():
        hvd.allreduce(one, name="barrier").wait_to_read()

    record = {"side": args.side, "workers": hvd.size(), "batch_per_worker": BATCH,
              "mxnet": mx.__version__, "package": package_version(args.side),
              "threads": {v: os.environ.get(v) for v in THREAD_VARIABLES}, "models": {}}
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        net, x, y = build_model(name, args.size)
        params = trainable(net)
        entry = {"parameters": sum(int(p.data().size) for p in params), "tensors": len(params)}
        step = make_step(hvd, net, x, y)
        entry["step_seconds"] = common.timed_steps(step, barrier, args.warmup, args.steps)
        record["models"][name] = entry
        if hvd.rank() == 0:
            print(f"{args.side} {name}: {entry['parameters'] / 1e6:.1f} M parameters, median "
                  f"step {common.median(entry['step_seconds']) * 1e3:.1f} ms", flush=True)
    if hvd.rank() == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
    hvd.shutdown()


if __name__ == "__main__":
    main()
