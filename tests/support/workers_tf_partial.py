"""Worker side of test_partial.py (issue 24, items 11 and 16): gradients of model-parallel
(local) variables, Keras's PartialDistributedOptimizer and BestModelCheckpoint,
SyncBatchNormalization as Horovod's suite builds it."""

from __future__ import annotations

import os
import tempfile

import keras
import numpy as np
import tensorflow as tf

import fuse.tensorflow as hvd
import fuse.tensorflow.keras as hvd_keras
from workers_tf_collectives import Checks


def _local_layer(r):
    layer = keras.layers.Dense(2, use_bias=False,
                               kernel_initializer=keras.initializers.Constant(1.0))
    layer.build((None, 2))
    return layer


def tapes():
    """PartialDistributedGradientTape and register_local_source: the shared gradient is
    averaged, the local one stays this rank's (divided by the size unless
    scale_local_gradients=False)."""
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    c = Checks()
    shared = tf.Variable([1.0, 2.0])
    layer = _local_layer(r)
    x = tf.constant([[1.0, 2.0]]) * (r + 1)
    # d/dkernel sum(x @ kernel) = x^T @ ones = [[x0, x0], [x1, x1]]
    local_grad = np.array([[1.0, 1.0], [2.0, 2.0]]) * (r + 1)
    mean_scale = np.mean([k + 1 for k in range(n)])

    def loss():
        return tf.reduce_sum(shared * (r + 1)) + tf.reduce_sum(layer(x))

    for mode in ("eager", "function"):
        def partial():
            with tf.GradientTape() as tape:
                value = loss()
            return hvd.PartialDistributedGradientTape(tape, local_layers=layer).gradient(
                value, [shared, layer.kernel])

        def registered():
            with tf.GradientTape() as tape:
                value = loss()
            dtape = hvd.DistributedGradientTape(tape, scale_local_gradients=False)
            dtape.register_local_source(layer.kernel)
            return dtape.gradient(value, [shared, layer.kernel])
        run = (lambda f: f()) if mode == "eager" else (lambda f: tf.function(f)())
        g_shared, g_local = run(partial)
        c.close(f"partial tape: shared gradient averaged {mode}", g_shared, [mean_scale] * 2)
        c.close(f"partial tape: local gradient kept, / size {mode}", g_local, local_grad / n)
        g_shared, g_local = run(registered)
        c.close(f"register_local_source: shared averaged {mode}", g_shared, [mean_scale] * 2)
        c.close(f"register_local_source, unscaled {mode}", g_local, local_grad)
    return c.result()


def keras_partial_and_checkpoint(tmp):
    """Keras's PartialDistributedOptimizer steps the local layer with this rank's gradient
    (divided by the size), the rest with the average; BestModelCheckpoint keeps the best
    epoch; SyncBatchNormalization accepts fused=False (Horovod's own suite passes it)."""
    hvd_keras.init()
    r, n = hvd_keras.rank(), hvd_keras.size()
    c = Checks()
    shared = keras.Variable(np.array([1.0, 2.0], np.float32))
    layer = _local_layer(r)
    x = tf.constant([[1.0, 2.0]]) * (r + 1)
    opt = hvd_keras.PartialDistributedOptimizer(keras.optimizers.SGD(1.0), local_layers=layer)
    with tf.GradientTape() as tape:
        value = tf.reduce_sum(shared * (r + 1)) + tf.reduce_sum(layer(x))
    grads = tape.gradient(value, [shared, layer.kernel])
    opt.apply_gradients(zip(grads, [shared, layer.kernel]))
    mean_scale = np.mean([k + 1 for k in range(n)])
    c.close("PartialDistributedOptimizer: shared variable took the average", shared,
            np.array([1.0, 2.0]) - mean_scale)
    c.close("PartialDistributedOptimizer: local layer took its own gradient / size",
            layer.kernel, 1.0 - np.array([[1.0, 1.0], [2.0, 2.0]]) * (r + 1) / n)

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    data = np.arange(16, dtype=np.float32).reshape(8, 2) / 16
    path = os.path.join(tmp, f"rank{r}", "best.keras")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    best = hvd_keras.callbacks.BestModelCheckpoint(monitor="val_loss", filepath=path)
    model.fit(data, data[:, :1], validation_data=(data, data[:, :1]), epochs=2, verbose=0,
              callbacks=[best])
    c.true("BestModelCheckpoint saved the best model", os.path.exists(path), path)
    c.true("BestModelCheckpoint keeps only the best", best.save_best_only)
    default = hvd_keras.callbacks.BestModelCheckpoint(save_weights_only=True)
    c.true("BestModelCheckpoint default path", str(default.filepath).endswith(".weights.h5"),
           str(default.filepath))

    bn = hvd.SyncBatchNormalization(axis=1, fused=False)
    xs = tf.constant([[1.0, 2.0], [3.0, 6.0]]) * (r + 1)
    out = bn(xs, training=True)
    every = np.concatenate([np.array([[1.0, 2.0], [3.0, 6.0]]) * (k + 1) for k in range(n)])
    mean, var = every.mean(axis=0), every.var(axis=0)
    c.close("SyncBatchNormalization(fused=False) normalises with every rank's batch", out,
            (xs.numpy() - mean) / np.sqrt(var + bn.epsilon), tol=1e-4)
    return c.result()


def adasum():
    """op=Adasum in allreduce (eager, tf.function, graph) and DistributedGradientTape; the
    inputs go back to the test, which checks against its NumPy reference."""
    hvd.init()
    r = hvd.rank()
    rng = np.random.default_rng(7 + r)
    x = rng.standard_normal(9).astype(np.float32)
    out = {"inputs": x.tolist()}
    out["eager"] = hvd.allreduce(tf.constant(x), op=hvd.Adasum).numpy().tolist()
    out["function"] = tf.function(lambda t: hvd.allreduce(t, op=hvd.Adasum))(
        tf.constant(x)).numpy().tolist()
    with tf.Graph().as_default():
        y = hvd.allreduce(tf.constant(x), op=hvd.Adasum)
        with tf.compat.v1.Session() as sess:
            out["graph"] = sess.run(y).tolist()
    v = tf.Variable(x)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(v * v)   # gradient 2x
    out["tape"] = hvd.DistributedGradientTape(tape, op=hvd.Adasum).gradient(
        loss, [v])[0].numpy().tolist()
    return out
