"""Keras training throughput of a small CNN on synthetic data with fuse, 1 and 2 workers.

Run:  python bench/studies/keras_throughput.py [--batch 64 --warmup 10 --steps 40 --rounds 3]
(in the TensorFlow environment: PATH=$PWD/.venv-tf/bin:$PATH).  It starts the workers itself
through ``fuse.run`` (Gloo), once with 1 worker and once with 2, each worker limited to one
TensorFlow compute thread so that a worker's compute is the same in both runs.

Each worker trains ``model.fit`` with ``fuse.tensorflow.keras.DistributedOptimizer`` and
``BroadcastGlobalVariablesCallback`` on its own synthetic 28x28 batches (per-worker batch
``--batch``).  Reported: samples/s over all workers (median of ``--rounds`` measured
epochs of ``--steps`` steps, after ``--warmup`` steps), the scaling efficiency
``throughput(2) / (2 * throughput(1))``, the step time, and the time per step spent inside
fuse's host functions (tensor conversion, submission and waiting for the allreduce: the
``tf.py_function`` bodies, measured by ``fuse.frameworks.tensorflow.bridge.host_time``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics


def worker(batch: int, warmup: int, steps: int, rounds: int) -> dict:
    import time

    import numpy as np
    import tensorflow as tf

    import keras

    import fuse.tensorflow.keras as hvd
    from fuse.frameworks.tensorflow import bridge

    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    rng = np.random.default_rng(hvd.rank())
    x = rng.normal(size=(batch * 8, 28, 28, 1)).astype("float32")
    y = rng.integers(0, 10, size=batch * 8)
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(batch).prefetch(4)

    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((28, 28, 1)),
        keras.layers.Conv2D(16, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10),
    ])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01, momentum=0.9)),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    class Clock(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()
            self.fuse_start = bridge.host_time()[0]

        def on_epoch_end(self, epoch, logs=None):
            self.seconds = time.perf_counter() - self.start
            self.fuse_seconds = bridge.host_time()[0] - self.fuse_start

    model.fit(data, steps_per_epoch=warmup, epochs=1, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    step_times, fuse_times = [], []
    for _ in range(rounds):
        clock = Clock()
        hvd.allreduce(np.zeros(1, np.float32), name="bench.align")   # start together
        model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[clock])
        step_times.append(clock.seconds / steps)
        fuse_times.append(clock.fuse_seconds / steps)
    params = int(sum(np.prod(w.shape) for w in model.trainable_weights))
    return {"step": statistics.median(step_times), "fuse": statistics.median(fuse_times),
            "params": params}


def run(np_: int, args) -> dict:
    import fuse
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="",
               TF_NUM_INTRAOP_THREADS="1", TF_NUM_INTEROP_THREADS="2", OMP_NUM_THREADS="1",
               FUSE_BACKEND="gloo", TF_ENABLE_ONEDNN_OPTS="0")
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in [env.get("PYTHONPATH")] if p])
    results = fuse.run(worker, args=(args.batch, args.warmup, args.steps, args.rounds),
                       np=np_, env=env)
    step = max(r["step"] for r in results)   # the job goes at its slowest worker's pace
    return {"workers": np_, "step_ms": step * 1e3,
            "fuse_ms": statistics.mean(r["fuse"] for r in results) * 1e3,
            "samples_per_s": np_ * args.batch / step, "params": results[0]["params"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    one = run(1, args)
    two = run(2, args)
    efficiency = two["samples_per_s"] / (2 * one["samples_per_s"])
    print(f"small CNN ({one['params']} parameters), per-worker batch {args.batch}, "
          f"{args.steps} steps x {args.rounds} rounds")
    for r in (one, two):
        print(f"  {r['workers']} worker(s): {r['samples_per_s']:8.1f} samples/s, "
              f"step {r['step_ms']:6.1f} ms, in fuse {r['fuse_ms']:5.2f} ms/step")
    print(f"  scaling efficiency (2 workers): {efficiency:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"one": one, "two": two, "efficiency": efficiency}, f, indent=1)


if __name__ == "__main__":
    main()
