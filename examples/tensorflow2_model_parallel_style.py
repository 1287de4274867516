"""A Horovod-style TensorFlow 2 script with a model-parallel part: each worker keeps its own
embedding layer (PartialDistributedGradientTape, then Keras's PartialDistributedOptimizer),
the shared tower is averaged; a second phase trains the shared tower with Adasum, and
model.fit keeps the best model with BestModelCheckpoint on rank 0.  Written for
``import horovod.tensorflow as hvd`` / ``horovod.tensorflow.keras``; only the imports were
changed."""

import argparse
import os
import tempfile

import keras
import numpy as np
import tensorflow as tf

import fuse.tensorflow as hvd
import fuse.tensorflow.keras as hvd_keras

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--checkpoint-dir", default=tempfile.gettempdir())
args = parser.parse_args()

# Horovod: initialize.
hvd.init()

# Each worker owns the embeddings of its own users (a local layer); the tower is shared.
rng = np.random.default_rng(hvd.rank())
users = rng.integers(0, 50, size=512)
items = rng.normal(size=(512, 4)).astype(np.float32)
labels = ((users % 2) * 2.0 - 1.0 + items.sum(axis=1, keepdims=True) * 0.5).astype(np.float32)

keras.utils.set_random_seed(hvd.rank())
embedding = keras.layers.Embedding(50, 4)          # local to this worker
tower = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(1)])
embedding.build((None,))


def predict(u, i):
    return tower(tf.concat([embedding(u), i], axis=1))


# Horovod: broadcast the shared tower only; the embeddings stay each worker's own.
hvd.broadcast_variables(tower.variables, root_rank=0)

opt = keras.optimizers.SGD(0.05)


@tf.function
def train_step(u, i, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(predict(u, i) - y))
    # Horovod: average the shared gradients; the local layer's stay local.
    tape = hvd.PartialDistributedGradientTape(tape, local_layers=[embedding])
    variables = embedding.trainable_weights + tower.trainable_weights
    opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
    return loss


first = None
for step in range(args.steps):
    batch = rng.integers(0, len(users), size=32)
    value = float(train_step(users[batch], items[batch], labels[batch]))
    first = value if first is None else first

# Phase 2: the shared tower alone, with Adasum, through Keras's own training loop.
features = np.concatenate([embedding(users).numpy(), items], axis=1)
keras_opt = hvd_keras.PartialDistributedOptimizer(keras.optimizers.SGD(0.01),
                                                  local_layers=[])
tower.compile(optimizer=keras_opt, loss="mse")
callbacks = [hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0)]
if hvd.rank() == 0:
    # Horovod: save checkpoints only on worker 0.
    callbacks.append(hvd_keras.callbacks.BestModelCheckpoint(
        monitor="loss", filepath=os.path.join(args.checkpoint_dir, "best_tower.keras")))
history = tower.fit(features, labels, batch_size=64, epochs=2, verbose=0,
                    callbacks=callbacks)

with tf.GradientTape() as tape:
    loss = tf.reduce_mean(tf.square(tower(features) - labels))
grads = hvd.DistributedGradientTape(tape, op=hvd.Adasum).gradient(
    loss, tower.trainable_variables)
opt.apply_gradients(zip(grads, tower.trainable_variables))
final = float(tf.reduce_mean(tf.square(predict(users, items) - labels)))

checksum = sum(float(np.abs(v.numpy()).sum()) for v in tower.variables)
print(f"rank {hvd.rank()} first loss {first:.4f} final loss {final:.4f} "
      f"tower checksum {checksum:.5f} fit loss {history.history['loss'][-1]:.4f}")
