"""Worker side of test_mx_optimizer.py: DistributedTrainer, DistributedOptimizer and
broadcast_parameters on 2 real workers, against a single-process reference."""

from __future__ import annotations

import warnings

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import fuse.mxnet as hvd

STEPS = 20
BATCH = 8          # per worker; the reference takes 2 * BATCH in one process
FEATURES, CLASSES = 10, 4


def _net(seed: int, deferred: bool = False):
    """A small MLP; ``deferred`` leaves the input size to the first forward."""
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(16, activation="relu", in_units=0 if deferred else FEATURES),
            gluon.nn.Dense(CLASSES, in_units=0 if deferred else 16))
    mx.random.seed(seed)
    net.initialize(mx.init.Xavier(), ctx=mx.cpu())
    return net


def _batches():
    """The global batches: step s uses rows [s*2B, (s+1)*2B); worker r takes its half."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((STEPS * 2 * BATCH, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, STEPS * 2 * BATCH).astype(np.float32)
    return x, y


def _train(net, trainer, rows, batch):
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    x, y = _batches()
    for s in range(STEPS):
        sl = rows(s)
        data, label = mx.nd.array(x[sl]), mx.nd.array(y[sl])
        with autograd.record():
            loss = loss_fn(net(data), label)
        loss.backward()
        trainer.step(batch)
    return _flat(net)


def _flat(net):
    return np.concatenate([p.data().asnumpy().ravel()
                           for _, p in sorted(net.collect_params().items())])


def _reference(seed, make_opt):
    """One process, batch 2B, a plain Trainer without kvstore."""
    ref = _net(seed)
    trainer = gluon.Trainer(ref.collect_params(), make_opt(), kvstore=None)
    return _train(ref, trainer, lambda s: slice(s * 2 * BATCH, (s + 1) * 2 * BATCH),
                  2 * BATCH)


def _distributed(seed, make_trainer):
    """This worker's half of each batch, parameters broadcast from rank 0 first (rank 1
    starts from other weights, so the broadcast matters)."""
    r = hvd.rank()
    net = _net(seed + 100 * r)
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    trainer = make_trainer(net.collect_params())
    return _train(net, trainer,
                  lambda s: slice(s * 2 * BATCH + r * BATCH, s * 2 * BATCH + (r + 1) * BATCH),
                  BATCH)


def equivalence():
    """Max |difference| of the parameters after 20 steps, per variant, against 1 process with
    batch 2B; and whether both ranks hold the same parameters (checked with allgather)."""
    hvd.init()
    sgd = lambda: mx.optimizer.SGD(learning_rate=0.1, momentum=0.9, wd=1e-4)  # noqa: E731
    adam = lambda: mx.optimizer.Adam(learning_rate=0.01)  # noqa: E731
    variants = {
        "trainer_sgd": (sgd, lambda p: hvd.DistributedTrainer(p, sgd())),
        "trainer_adam_str": (adam, lambda p: hvd.DistributedTrainer(
            p, "adam", optimizer_params={"learning_rate": 0.01})),
        "trainer_groups_predivide": (sgd, lambda p: hvd.DistributedTrainer(
            p, sgd(), num_groups=2, gradient_predivide_factor=2.0, prefix="g.")),
        "optimizer_sgd": (sgd, lambda p: gluon.Trainer(
            p, hvd.DistributedOptimizer(sgd()), kvstore=None)),
        "optimizer_adam_groups_predivide": (adam, lambda p: gluon.Trainer(
            p, hvd.DistributedOptimizer(adam(), gradient_predivide_factor=4.0, num_groups=3),
            kvstore=None)),
    }
    out = {}
    for k, (name, (make_opt, make_trainer)) in enumerate(variants.items()):
        expected = _reference(k, make_opt)
        got = _distributed(k, make_trainer)
        both = hvd.allgather(mx.nd.array(got[None, :]), name=f"check.{name}").asnumpy()
        out[name] = {"max_diff": float(np.abs(got - expected).max()),
                     "moved": float(np.abs(expected - _flat(_net(k))).max()),
                     "replicas_equal": bool(np.array_equal(both[0], both[1]))}
    hvd.shutdown()
    return out


def compression_fp16():
    """fp16 on the wire: replicas stay identical and close to the float32 reference."""
    hvd.init()
    sgd = lambda: mx.optimizer.SGD(learning_rate=0.1, momentum=0.9)  # noqa: E731
    expected = _reference(11, sgd)
    got = _distributed(11, lambda p: hvd.DistributedTrainer(
        p, sgd(), compression=hvd.Compression.fp16))
    both = hvd.allgather(mx.nd.array(got[None, :]), name="check.fp16").asnumpy()
    grad_dtypes = set()
    # the gradients themselves stay float32 (decompressed back in place)
    net = _net(12)
    trainer = hvd.DistributedTrainer(net.collect_params(), sgd(),
                                     compression=hvd.Compression.fp16, prefix="dt.")
    with autograd.record():
        loss = net(mx.nd.ones((2, FEATURES)) * (hvd.rank() + 1)).sum()
    loss.backward()
    trainer.allreduce_grads()
    for _, p in sorted(net.collect_params().items()):
        grad_dtypes.add(str(np.dtype(p.grad().dtype)))
    grads = np.concatenate([p.grad().asnumpy().ravel()
                            for _, p in sorted(net.collect_params().items())])
    grads_both = hvd.allgather(mx.nd.array(grads[None, :]), name="check.grads").asnumpy()
    hvd.shutdown()
    return {"max_diff": float(np.abs(got - expected).max()),
            "replicas_equal": bool(np.array_equal(both[0], both[1])),
            "grad_dtypes": sorted(grad_dtypes),
            "grads_equal": bool(np.array_equal(grads_both[0], grads_both[1]))}


def parameters_and_options():
    """broadcast_parameters on a dict of NDArrays, on a ParameterDict (deferred
    initialisation included), DistributedOptimizer.update called directly (Module-API
    style), and the wrappers' plumbing."""
    hvd.init()
    r = hvd.rank()
    report = {}

    arrays = {"b": mx.nd.full((3,), r + 1.0), "a": mx.nd.arange(4) * (r + 1)}
    hvd.broadcast_parameters(arrays, root_rank=1, prefix="dict.")
    report["dict"] = (arrays["b"].asnumpy().tolist() == [2.0] * 3
                      and arrays["a"].asnumpy().tolist() == [0.0, 2.0, 4.0, 6.0])

    # deferred: the shapes are known only after the first forward; the broadcast happens then
    net = _net(50 + r, deferred=True)
    hvd.broadcast_parameters(net.collect_params(), root_rank=0, prefix="deferred.")
    net(mx.nd.ones((1, FEATURES)))
    flat = _flat(net)
    both = hvd.allgather(mx.nd.array(flat[None, :]), name="check.deferred").asnumpy()
    report["deferred_equal"] = bool(np.array_equal(both[0], both[1]))
    report["deferred_from_root"] = bool(
        np.array_equal(flat, _flat(_materialised(_net(50, deferred=True)))))

    # DistributedOptimizer.update / update_multi_precision with an int index and with lists
    opt = hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=1.0))
    w = mx.nd.zeros((3,))
    g = mx.nd.full((3,), r + 1.0)
    opt.update(0, w, g, opt.create_state(0, w))
    report["update_single"] = w.asnumpy().tolist() == [-1.5] * 3
    ws = [mx.nd.zeros((2,)), mx.nd.zeros((2,))]
    gs = [mx.nd.full((2,), 2.0 * r), mx.nd.full((2,), 4.0 * r)]
    opt.update_multi_precision([1, 2], ws, gs, [None, None])
    report["update_list"] = [x.asnumpy().tolist() for x in ws] == [[-1.0, -1.0], [-2.0, -2.0]]

    # attributes go to the wrapped optimizer, both ways
    inner = mx.optimizer.SGD(learning_rate=0.5)
    wrapped = hvd.DistributedOptimizer(inner)
    wrapped.rescale_grad = 0.25
    wrapped.set_learning_rate(0.125)
    report["forwarding"] = (inner.rescale_grad == 0.25 and wrapped.learning_rate == 0.125
                            and isinstance(wrapped, mx.optimizer.Optimizer))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        unwrapped = hvd.DistributedTrainer(_net(2).collect_params(),
                                           hvd.DistributedOptimizer(mx.optimizer.SGD()),
                                           prefix="unwrap.")
    report["trainer_unwraps"] = (not isinstance(unwrapped._optimizer, hvd.DistributedOptimizer)
                                 and any("DistributedOptimizer" in str(c.message)
                                         for c in caught))
    try:
        hvd.DistributedOptimizer("sgd")
        report["type_error"] = False
    except TypeError:
        report["type_error"] = True
    try:
        hvd.DistributedTrainer(_net(1).collect_params(), "sgd", prefix=3)
        report["prefix_error"] = False
    except ValueError:
        report["prefix_error"] = True
    hvd.shutdown()
    return report


def _materialised(net):
    net(mx.nd.ones((1, FEATURES)))
    return net


def trainer_mismatch():
    """The ranks' models disagree on a parameter's shape: both ranks raise, naming it."""
    hvd.init()
    r = hvd.rank()
    net = gluon.nn.Dense(3 + r, in_units=2)
    net.initialize(ctx=mx.cpu())
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", prefix="mismatch.")
    with autograd.record():
        loss = net(mx.nd.ones((1, 2))).sum()
    loss.backward()
    try:
        trainer.step(1)
        text = "no error"
    except Exception as err:
        text = f"{type(err).__name__}: {err}"
    ok = hvd.allreduce(mx.nd.ones((1,)), op=hvd.Sum, name="after").asnumpy().tolist()
    hvd.shutdown()
    return text, ok
