"""A Horovod-style Keras training script (synthetic MNIST-like data).  Written for
``import horovod.tensorflow.keras as hvd``; only that import line was changed."""

import argparse

import numpy as np
import tensorflow as tf
import keras

import fuse.tensorflow.keras as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=4)
parser.add_argument("--batch-size", type=int, default=32)
args = parser.parse_args()

# Horovod: initialize.
hvd.init()

# Synthetic data: 28x28 images whose class is where their bright square sits; each worker
# reads its own shard.
rng = np.random.default_rng(hvd.rank())
n = 1024
labels = rng.integers(0, 4, size=n)
images = rng.normal(0, 0.3, size=(n, 28, 28, 1)).astype("float32")
for i, c in enumerate(labels):
    row, col = divmod(int(c), 2)
    images[i, row * 14:row * 14 + 14, col * 14:col * 14 + 14] += 1.0
dataset = tf.data.Dataset.from_tensor_slices((images, labels)).repeat().shuffle(256, seed=0)
dataset = dataset.batch(args.batch_size)

keras.utils.set_random_seed(hvd.rank())   # different initial weights: the callback fixes it
model = keras.Sequential([
    keras.Input((28, 28, 1)),
    keras.layers.Conv2D(8, 3, activation="relu"),
    keras.layers.MaxPooling2D(),
    keras.layers.Conv2D(16, 3, activation="relu"),
    keras.layers.MaxPooling2D(),
    keras.layers.Flatten(),
    keras.layers.Dense(32, activation="relu"),
    keras.layers.Dense(4),
])

# Horovod: adjust learning rate based on number of workers.
scaled_lr = 0.01 * hvd.size()
opt = keras.optimizers.SGD(learning_rate=scaled_lr, momentum=0.9)

# Horovod: add Horovod DistributedOptimizer.
opt = hvd.DistributedOptimizer(opt)

model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              optimizer=opt, metrics=["accuracy"])

callbacks = [
    # Horovod: broadcast initial variable states from rank 0 to all other processes.
    hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    # Horovod: average metrics among workers at the end of every epoch.
    hvd.callbacks.MetricAverageCallback(),
    # Horovod: using `lr = 1.0 * hvd.size()` from the very beginning leads to worse final
    # accuracy. Scale the learning rate `lr = 1.0` ---> `lr = 1.0 * hvd.size()` during
    # the first epochs.
    hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=2, verbose=1),
]

# Horovod: write logs on worker 0.
verbose = 1 if hvd.rank() == 0 else 0

history = model.fit(dataset, steps_per_epoch=16, callbacks=callbacks, epochs=args.epochs,
                    verbose=verbose)

checksum = sum(float(np.abs(w).sum()) for w in model.get_weights())
losses = history.history["loss"]
print(f"rank {hvd.rank()} final loss {losses[-1]:.4f} first loss {losses[0]:.4f} "
      f"checksum {checksum:.6f}")
