"""Worker side of test_keras.py: Keras 3 training on 2 workers checked against one process
with the whole batch, callbacks, load_model, SyncBatchNormalization and the tape options."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import tensorflow as tf

from workers_tf_collectives import Checks

STEPS = 20
B = 8


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 6, 6, 1)).astype(np.float32)
    y = (x.reshape(n, -1).sum(1) > 0).astype(np.int64) + (x[:, 0, 0, 0] > 1).astype(np.int64)
    return x, y


def _model():
    import keras
    keras.utils.set_random_seed(1234)
    return keras.Sequential([
        keras.Input((6, 6, 1)),
        keras.layers.Conv2D(4, 3, activation="relu"),
        keras.layers.Flatten(),
        keras.layers.Dense(8, activation="tanh"),
        keras.layers.Dense(3),
    ])


def _shard(x, rank, size, per_rank):
    """Rank ``rank``'s rows, ordered so that its k-th batch is its part of global batch k."""
    steps = len(x) // (per_rank * size)
    return x.reshape(steps, size, per_rank, *x.shape[1:])[:, rank].reshape(-1, *x.shape[1:])


def _loss():
    import keras
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _reference_weights(global_batch, passes=1):
    """One process, no fuse: STEPS updates with the whole global batch."""
    import keras
    x, y = _data(global_batch * STEPS)
    model = _model()
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss=_loss())
    model.fit(x, y, batch_size=global_batch, epochs=1, shuffle=False, verbose=0)
    return [w.numpy() for w in model.weights]


def equivalence(module_name):
    """2 workers x batch B with the distributed optimizer and model.fit == 1 process x 2B,
    after 20 steps; the same with backward_passes_per_step=2 against 1 process x 4B; and a
    DistributedGradientTape loop in tf.function.  ``module_name`` is the import under test."""
    import importlib

    import keras
    hvd = importlib.import_module(module_name)
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    c = Checks()

    x, y = _data(n * B * STEPS)
    model = _model()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9))
    c.true("DistributedOptimizer is still an SGD", isinstance(opt, keras.optimizers.SGD))
    model.compile(optimizer=opt, loss=_loss())
    model.fit(_shard(x, r, n, B), _shard(y, r, n, B), batch_size=B, epochs=1, shuffle=False,
              verbose=0, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    c.true("20 optimizer steps", int(opt.iterations.numpy()) == STEPS,
           str(opt.iterations.numpy()))
    ref = _reference_weights(n * B)
    for i, (w, e) in enumerate(zip(model.weights, ref)):
        c.close(f"model.fit weight {i} vs one process with batch {n * B}", w.numpy(), e, 2e-5)
    gathered = hvd.allgather_object([w.numpy() for w in model.weights])
    c.true("ranks hold the same weights", all(np.array_equal(a, b) for a, b in
                                               zip(gathered[0], gathered[1])))

    # backward_passes_per_step=2, averaged: 2 workers x 2 passes x B == 1 process x 4B
    x4, y4 = _data(n * B * STEPS)
    model = _model()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9),
                                   backward_passes_per_step=2,
                                   average_aggregated_gradients=True)
    model.compile(optimizer=opt, loss=_loss())
    xs = _shard(x4.reshape(STEPS // 2, 2, n, B, 6, 6, 1).transpose(0, 2, 1, 3, 4, 5, 6)
                .reshape(-1, 6, 6, 1), r, n, 2 * B)
    ys = _shard(y4.reshape(STEPS // 2, 2, n, B).transpose(0, 2, 1, 3).reshape(-1), r, n, 2 * B)
    model.fit(xs, ys, batch_size=B, epochs=1, shuffle=False, verbose=0)
    c.true("backward_passes_per_step=2 applies every 2nd call",
           int(opt.iterations.numpy()) == STEPS // 2, str(opt.iterations.numpy()))
    ref_model = _model()
    ref_model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss=_loss())
    ref_model.fit(x4, y4, batch_size=2 * n * B, epochs=1, shuffle=False, verbose=0)
    for i, (w, e) in enumerate(zip(model.weights, ref_model.weights)):
        c.close(f"backward_passes_per_step=2 weight {i} vs one process with batch "
                f"{2 * n * B}", w.numpy(), e.numpy(), 2e-5)

    # DistributedGradientTape in a tf.function training loop (fuse.tensorflow API)
    import fuse.tensorflow as hvdtf
    model = _model()
    sgd = keras.optimizers.SGD(0.1, momentum=0.9)
    loss_fn = _loss()

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        tape = hvdtf.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        sgd.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    hvdtf.broadcast_variables(model.variables, root_rank=0)
    xs, ys = _shard(x, r, n, B), _shard(y, r, n, B)
    for s in range(STEPS):
        step(xs[s * B:(s + 1) * B], ys[s * B:(s + 1) * B])
    for i, (w, e) in enumerate(zip(model.weights, ref)):
        c.close(f"DistributedGradientTape loop weight {i} vs one process", w.numpy(), e, 2e-5)
    return c.result()


def keras_features():
    """Callbacks, load_model, SyncBatchNormalization, the tape options, fuse.tensorflow's
    DistributedOptimizer, and the Keras XLA error."""
    import keras

    import fuse.keras as hvd
    import fuse.tensorflow as hvdtf
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    c = Checks()
    x, y = _data(n * B * 4)
    xs, ys = _shard(x, r, n, B), _shard(y, r, n, B)

    # MetricAverageCallback: every rank logs the average of the ranks' metrics
    class Record(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.logs = []

        def on_epoch_end(self, epoch, logs=None):
            self.logs.append(dict(logs))

    class Local(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.logs = []

        def on_epoch_end(self, epoch, logs=None):
            self.logs.append(dict(logs))

    model = _model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05)),
                  loss=_loss(), metrics=["accuracy"])
    local, seen = Local(), Record()
    warm = hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.05, warmup_epochs=2,
                                                    verbose=0)
    model.fit(xs, ys, batch_size=B, epochs=3, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), local,
                         hvd.callbacks.MetricAverageCallback(), warm, seen])
    everyone = hvd.allgather_object(local.logs)
    for epoch in range(3):
        for key in ("loss", "accuracy"):
            expected = np.mean([everyone[k][epoch][key] for k in range(n)])
            c.close(f"MetricAverageCallback {key} epoch {epoch}", seen.logs[epoch][key],
                    expected, 1e-6)
    c.close("LearningRateWarmupCallback lr after epoch 1 (half way)",
            seen.logs[0]["lr"], 0.05 / n * (1.0 * (n - 1) / 2 + 1), 1e-4)
    c.close("LearningRateWarmupCallback lr after warm-up", seen.logs[2]["lr"], 0.05, 1e-6)

    sched = hvd.callbacks.LearningRateScheduleCallback(initial_lr=0.1, multiplier=0.5,
                                                       start_epoch=1)
    model.fit(xs, ys, batch_size=B, epochs=2, shuffle=False, verbose=0,
              callbacks=[sched, seen])
    c.close("LearningRateScheduleCallback", seen.logs[-1]["lr"], 0.05, 1e-6)

    # load_model: the optimizer comes back distributed, with its state
    path = os.path.join(tempfile.gettempdir(), f"fuse_tf_model_{os.getppid()}_{r}.keras")
    model.save(path)
    loaded = hvd.load_model(path)
    os.remove(path)
    c.true("load_model gives a distributed optimizer",
           hasattr(loaded.optimizer, "_fuse_reducer"))
    c.true("load_model keeps the iteration count",
           int(loaded.optimizer.iterations.numpy()) == int(model.optimizer.iterations.numpy()))
    loaded.fit(xs, ys, batch_size=B, epochs=1, shuffle=False, verbose=0)
    w = hvd.allgather_object([v.numpy() for v in loaded.weights])
    c.true("the loaded model trains in step on both ranks",
           all(np.array_equal(a, b) for a, b in zip(w[0], w[1])))

    # SyncBatchNormalization: statistics of the global batch
    full = np.random.default_rng(5).normal(size=(n * 4, 3)).astype(np.float32) * 3 + 1
    sbn = hvd.SyncBatchNormalization(momentum=0.5)
    bn = keras.layers.BatchNormalization(momentum=0.5)
    mine = full[r * 4:(r + 1) * 4]
    with tf.GradientTape() as tape:
        inp = tf.constant(mine)
        tape.watch(inp)
        out = sbn(inp, training=True)
        s_loss = tf.reduce_sum(out * tf.range(1, 4, dtype=tf.float32))
    s_grad = tape.gradient(s_loss, inp)
    with tf.GradientTape() as tape:
        inp_all = tf.constant(full)
        tape.watch(inp_all)
        ref_out = bn(inp_all, training=True)
        r_loss = tf.reduce_sum(ref_out * tf.range(1, 4, dtype=tf.float32))
    r_grad = tape.gradient(r_loss, inp_all)
    c.close("SyncBatchNormalization output", out, ref_out.numpy()[r * 4:(r + 1) * 4], 1e-4)
    c.close("SyncBatchNormalization moving mean", sbn.moving_mean, bn.moving_mean, 1e-5)
    c.close("SyncBatchNormalization moving variance", sbn.moving_variance,
            bn.moving_variance, 1e-4)
    c.close("SyncBatchNormalization input gradient", s_grad,
            r_grad.numpy()[r * 4:(r + 1) * 4], 1e-4)
    out_fn = tf.function(lambda t: sbn(t, training=True))(tf.constant(mine))
    c.true("SyncBatchNormalization in tf.function", out_fn.shape == (4, 3))

    # DistributedGradientTape options
    v = tf.Variable([1.0, 2.0, 3.0])
    u = tf.Variable([[1.0], [2.0]])
    emb = tf.Variable(np.arange(8, dtype=np.float32).reshape(4, 2))

    def tape_grads(fn=None, **options):
        def run():
            with tf.GradientTape() as tape:
                loss = (tf.reduce_sum(v * v) * (r + 1) + tf.reduce_sum(u) * (r + 1)
                        + tf.reduce_sum(tf.gather(emb, [r, 3])) * (r + 1))
            return hvdtf.DistributedGradientTape(tape, **options).gradient(loss, [v, u, emb])
        return (fn or (lambda f: f))(run)()
    scale = np.mean([k + 1 for k in range(n)])
    expected = [2 * np.array([1.0, 2.0, 3.0]) * scale, np.full((2, 1), scale)]
    emb_expected = np.zeros((4, 2))
    for k in range(n):
        emb_expected[k] += (k + 1) / n
    emb_expected[3] += scale
    cases = {
        "default": ({}, 1.0),
        "op=Sum": ({"op": hvd.Sum}, float(n)),
        "gradient_predivide_factor": ({"gradient_predivide_factor": 2.0}, 1.0),
        "compression fp16": ({"compression": hvd.Compression.fp16}, 1.0),
        "compression bf16": ({"compression": hvd.Compression.bf16}, 1.0),
        "sparse_as_dense": ({"sparse_as_dense": True}, 1.0),
        "num_groups": ({"num_groups": 1}, 1.0),
        "groups": ({"groups": [[v, emb]]}, 1.0),
    }
    for label, (options, factor) in cases.items():
        for mode, wrap in (("eager", None), ("function", tf.function)):
            g = tape_grads(wrap, **options)
            tol = 2e-2 if "compression" in label else 1e-6
            c.close(f"tape {label} {mode} dense", g[0], expected[0] * factor, tol)
            c.close(f"tape {label} {mode} dense 2", g[1], expected[1] * factor, tol)
            c.close(f"tape {label} {mode} embedding", tf.convert_to_tensor(g[2]),
                    emb_expected * factor, tol)
            if label == "sparse_as_dense":
                c.true(f"tape sparse_as_dense {mode} gives a dense tensor",
                       not isinstance(g[2], tf.IndexedSlices))
            if label == "default":
                c.true(f"tape default {mode} keeps IndexedSlices",
                       isinstance(g[2], tf.IndexedSlices))

    # the small dense gradients (v's and u's) cross to the engine packed into one allreduce
    from fuse.worker import lifecycle
    engine = lifecycle.engine()

    @tf.function
    def dense_grads():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(v * v) * (r + 1) + tf.reduce_sum(u) * (r + 1)
        return hvdtf.DistributedGradientTape(tape).gradient(loss, [v, u])
    dense_grads()
    before = engine.stats()
    g = dense_grads()
    after = engine.stats()
    c.true("tape packs the small dense gradients into one allreduce",
           (after["tensors"] + after["inline"]) - (before["tensors"] + before["inline"]) == 1,
           str({k: after[k] - before[k] for k in ("tensors", "inline")}))
    c.close("packed tape gradients", g[0], expected[0])
    c.close("packed tape gradients 2", g[1], expected[1])

    # fuse.tensorflow.DistributedOptimizer with apply_gradients in tf.function
    opt = hvdtf.DistributedOptimizer(keras.optimizers.SGD(1.0))
    w = tf.Variable([0.0, 0.0])

    @tf.function
    def opt_step():
        opt.apply_gradients([(tf.constant([1.0, 2.0]) * (r + 1), w)])
    opt_step()
    c.close("fuse.tensorflow.DistributedOptimizer apply_gradients", w,
            -np.array([1.0, 2.0]) * scale)
    # eagerly, with backward_passes_per_step=2 (summed): nothing moves until the 2nd call
    opt = hvdtf.DistributedOptimizer(keras.optimizers.SGD(1.0), backward_passes_per_step=2)
    w = tf.Variable([0.0, 0.0])
    opt.apply_gradients([(tf.constant([1.0, 2.0]) * (r + 1), w)])
    c.close("eager backward_passes_per_step=2, first call", w, [0.0, 0.0])
    opt.apply_gradients([(tf.constant([1.0, 2.0]) * (r + 1), w)])
    c.close("eager backward_passes_per_step=2, second call", w,
            -2 * np.array([1.0, 2.0]) * scale)
    c.true("eager backward_passes_per_step=2 counts one step",
           int(opt.iterations.numpy()) == 1)

    # model.fit with run_eagerly=True: the same weights on both ranks afterwards
    model = _model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)),
                  loss=_loss(), run_eagerly=True)
    model.fit(xs, ys, batch_size=B, epochs=1, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    same = hvd.allgather_object([v.numpy() for v in model.weights])
    c.true("model.fit run_eagerly=True keeps the ranks in step",
           all(np.array_equal(a, b) for a, b in zip(same[0], same[1])))

    try:
        hvdtf.DistributedOptimizer(object())
        c.true("DistributedOptimizer rejects a non-Keras optimizer", False)
    except TypeError as err:
        c.true("DistributedOptimizer rejects a non-Keras optimizer", "Keras" in str(err))

    # Keras with XLA: a clear error naming jit_compile
    model = _model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)),
                  loss=_loss(), jit_compile=True)
    try:
        model.fit(xs[:B], ys[:B], batch_size=B, epochs=1, verbose=0)
        c.true("model.fit with jit_compile=True raises", False)
    except Exception as err:   # noqa: BLE001
        c.true("model.fit with jit_compile=True raises XlaNotSupportedError",
               type(err).__name__ == "XlaNotSupportedError"
               and "jit_compile=False" in str(err), f"{type(err).__name__}: {err}")
    return c.result()
