"""One side of bench/suite/tf_step.py: a TensorFlow training step on 2 workers.

    fuserun -np 2 python bench/suite/tf_worker.py --side fuse --json f
    TF_CONFIG=... python bench/suite/tf_worker.py --side mwms --json f    (one per worker)

``--side fuse``: ``fuse.tensorflow``'s ``DistributedGradientTape`` in a ``tf.function`` step
(and, with ``--fit``, Keras ``model.fit`` with ``fuse.tensorflow.keras.DistributedOptimizer``).
``--side mwms``: ``tf.distribute.MultiWorkerMirroredStrategy`` (its ring collectives over
gRPC), the TF_CONFIG naming the two workers; the same step under ``strategy.run`` (and
``model.fit`` under the strategy's scope).

Both sides set TensorFlow's intra-op and inter-op pools to ``--threads`` (default: this
worker's share of the cores) before TensorFlow starts, so they compute with the same budget.
Models (``--models``): ``dense``, four 2560x2560 Dense layers and a 10-way head (26.3 M
parameters in 10 tensors, gradient-heavy: little compute per parameter); ``resnet50``,
``keras.applications.ResNet50`` (25.6 M parameters in 214 tensors) on 32x32 inputs, so the
parameter set is ResNet-50's and the compute small. Each step: forward, the tape's gradient,
the gradients averaged over the workers, Keras SGD with momentum. Rank 0 writes the step times.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

BATCH = 16              # samples per worker and step
DENSE_WIDTH = 2560
DENSE_LAYERS = 4
IMAGE = 32


def set_threads(n: int) -> None:
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(n)
    tf.config.threading.set_inter_op_parallelism_threads(n)


def build_model(name: str, size: str):
    """The Keras model and one worker's fixed batch (inputs, integer labels)."""
    import keras
    import numpy as np
    rng = np.random.default_rng(0)
    if name == "dense":
        width = DENSE_WIDTH if size == "full" else 64
        model = keras.Sequential([keras.Input((width,))]
                                 + [keras.layers.Dense(width, activation="relu")
                                    for _ in range(DENSE_LAYERS)]
                                 + [keras.layers.Dense(10)])
        x = rng.standard_normal((BATCH, width)).astype("float32")
    elif name == "resnet50":
        if size == "full":
            model = keras.applications.ResNet50(weights=None, input_shape=(IMAGE, IMAGE, 3),
                                                classes=1000, classifier_activation=None)
        else:   # the test's tiny stand-in: same code path, a few thousand parameters
            model = keras.Sequential([keras.Input((IMAGE, IMAGE, 3)),
                                      keras.layers.Conv2D(8, 3, strides=4),
                                      keras.layers.BatchNormalization(),
                                      keras.layers.GlobalAveragePooling2D(),
                                      keras.layers.Dense(10)])
        x = rng.standard_normal((BATCH, IMAGE, IMAGE, 3)).astype("float32")
    else:
        raise ValueError(f"unknown model {name!r}: dense or resnet50")
    y = rng.integers(0, 10, BATCH).astype("int32")
    return model, x, y


def loss_fn():
    import keras
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def optimizer():
    import keras
    return keras.optimizers.SGD(learning_rate=1e-4, momentum=0.9)


class FuseSide:
    def __init__(self):
        import fuse.tensorflow as hvd
        hvd.init()
        self.hvd = hvd
        self.rank, self.size = hvd.rank(), hvd.size()

    def scope(self):
        import contextlib
        return contextlib.nullcontext()

    def barrier(self):
        self.hvd.barrier()

    def loop_step(self, model, x, y):
        import tensorflow as tf
        hvd, loss, opt = self.hvd, loss_fn(), optimizer()
        x, y = tf.constant(x), tf.constant(y)

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                value = loss(y, model(x, training=True))
            tape = hvd.DistributedGradientTape(tape)
            grads = tape.gradient(value, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            return value

        step()      # build the optimizer's slots before they are broadcast
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(opt.variables, root_rank=0)
        return step

    def fit_step(self, model, x, y, steps):
        import tensorflow as tf
        import fuse.tensorflow.keras as hvd_keras
        model.compile(optimizer=hvd_keras.DistributedOptimizer(optimizer()), loss=loss_fn(),
                      jit_compile=False)
        data = tf.data.Dataset.from_tensors((x, y)).repeat()
        callbacks = [hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0)]
        return lambda: model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0,
                                 callbacks=callbacks)

    def close(self):
        self.hvd.shutdown()


class MwmsSide:
    def __init__(self):
        import tensorflow as tf
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING)
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=options)
        self.rank = self.strategy.cluster_resolver.task_id
        self.size = self.strategy.num_replicas_in_sync
        one = tf.constant(1.0)

        @tf.function
        def barrier():
            ctx = tf.distribute.get_replica_context()
            return ctx.all_reduce(tf.distribute.ReduceOp.SUM, one)
        self._barrier = lambda: self.strategy.run(barrier)

    def scope(self):
        return self.strategy.scope()

    def barrier(self):
        self._barrier()

    def loop_step(self, model, x, y):
        import tensorflow as tf
        strategy, loss = self.strategy, loss_fn()
        with strategy.scope():
            opt = optimizer()
        x, y = tf.constant(x), tf.constant(y)
        size = float(self.size)

        def replica_step():
            with tf.GradientTape() as tape:
                value = loss(y, model(x, training=True))
            grads = tape.gradient(value, model.trainable_variables)
            # Keras' optimizer sums the replicas' gradients: divide first to average them
            grads = [g / size for g in grads]
            opt.apply_gradients(zip(grads, model.trainable_variables))
            return value

        @tf.function
        def step():
            return strategy.run(replica_step)
        return step

    def fit_step(self, model, x, y, steps):
        import tensorflow as tf
        with self.strategy.scope():
            model.compile(optimizer=optimizer(), loss=loss_fn(), jit_compile=False)
        data = tf.data.Dataset.from_tensors((x, y)).repeat()
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = \
            tf.data.experimental.AutoShardPolicy.OFF
        data = data.with_options(options)
        return lambda: model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0)

    def close(self):
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--side", choices=("fuse", "mwms"), required=True)
    ap.add_argument("--models", default="dense,resnet50")
    ap.add_argument("--size", choices=("full", "tiny"), default="full",
                    help="tiny: small stand-ins for the models (the workload's test)")
    ap.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) // 2),
                    help="TensorFlow intra-op and inter-op threads per worker")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--fit", action="store_true", help="also time Keras model.fit")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    set_threads(args.threads)
    side = FuseSide() if args.side == "fuse" else MwmsSide()
    record = {"side": args.side, "threads": {"intra_op": args.threads, "inter_op": args.threads},
              "workers": side.size, "batch_per_worker": BATCH, "models": {}, "notes": []}
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        with side.scope():
            model, x, y = build_model(name, args.size)
        params = sum(int(v.shape.num_elements()) for v in model.trainable_variables)
        entry = {"parameters": params, "tensors": len(model.trainable_variables)}
        step = side.loop_step(model, x, y)
        entry["loop_seconds"] = common.timed_steps(step, side.barrier, args.warmup, args.steps)
        if args.fit:
            # one fit call of `steps` steps, after a warm-up call: seconds per step
            try:
                with side.scope():
                    fit_model, x, y = build_model(name, args.size)
                fit = side.fit_step(fit_model, x, y, args.steps)
                runs = common.timed_steps(fit, side.barrier, 1, 1)
                entry["fit_seconds_per_step"] = runs[0] / args.steps
            except Exception as err:     # noqa: BLE001 - reported, the loop figures stand
                import traceback
                traceback.print_exc()
                text = " ".join(str(err).split())   # values in the message: keep its ends
                if len(text) > 300:
                    text = f"{text[:90]} ... {text[-160:]}"
                entry["fit_error"] = f"{type(err).__name__}: {text}"
        record["models"][name] = entry
        if side.rank == 0:
            print(f"{args.side} {name}: {params / 1e6:.1f} M parameters, median loop step "
                  f"{common.median(entry['loop_seconds']) * 1e3:.1f} ms"
                  + (f", fit {entry['fit_seconds_per_step'] * 1e3:.1f} ms/step"
                     if "fit_seconds_per_step" in entry else "")
                  + (f", fit failed: {entry['fit_error']}" if "fit_error" in entry else ""),
                  flush=True)
    if side.rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
    side.close()


if __name__ == "__main__":
    main()
