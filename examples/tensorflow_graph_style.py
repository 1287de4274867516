"""A Horovod-style TensorFlow 1 graph script (a session runs the graph): linear regression on
synthetic data with gradients averaged by unnamed allreduces, the variables broadcast from
rank 0, a caught error from ranks that disagree, and an Adasum allreduce.  Written for
``import horovod.tensorflow as hvd``; only that import line was changed."""

import argparse

import numpy as np
import tensorflow as tf

import fuse.tensorflow as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--lr", type=float, default=0.1)
args = parser.parse_args()

tf.compat.v1.disable_eager_execution()

# Horovod: initialize.
hvd.init()

# Each worker has its own shard of y = x . [2, -3, 0.5] + 1.
rng = np.random.default_rng(hvd.rank())
features = rng.normal(size=(256, 3)).astype(np.float32)
targets = (features @ np.array([2.0, -3.0, 0.5], np.float32) + 1.0)[:, None]

x = tf.compat.v1.placeholder(tf.float32, [None, 3])
y = tf.compat.v1.placeholder(tf.float32, [None, 1])
# different initial values on each worker: the broadcast below makes them equal
weights = tf.compat.v1.Variable(tf.random.normal([3, 1], seed=hvd.rank()), name="weights")
bias = tf.compat.v1.Variable(tf.zeros([1]), name="bias")
loss = tf.reduce_mean(tf.square(tf.matmul(x, weights) + bias - y))

# Horovod: average the gradients over the workers (unnamed: the graph names them).
grads = tf.compat.v1.gradients(loss, [weights, bias])
averaged = [hvd.allreduce(g, op=hvd.Average) for g in grads]
train_op = tf.group(*[v.assign_sub(args.lr * g) for v, g in zip([weights, bias], averaged)])

# Horovod: broadcast initial variable states from rank 0 to all other processes.
bcast = hvd.broadcast_global_variables(0)

# Ranks that disagree (here: on the shape) get FailedPreconditionError, as with Horovod.
mismatched = hvd.allreduce(tf.ones([2 + hvd.rank()]))

# Adasum of the final gradients: orthogonal parts add up, parallel parts average.
adasum_grads = hvd.allreduce(grads[0], op=hvd.Adasum)

with tf.compat.v1.Session() as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    sess.run(bcast)
    first = None
    for step in range(args.steps):
        batch = rng.integers(0, len(features), size=32)
        _, value = sess.run([train_op, loss], {x: features[batch], y: targets[batch]})
        first = value if first is None else first
    try:
        sess.run(mismatched)
        mismatch = "none"
    except tf.errors.FailedPreconditionError:
        mismatch = "FailedPreconditionError"
    adasum = sess.run(adasum_grads, {x: features, y: targets})
    final = sess.run(loss, {x: features, y: targets})
    w = sess.run(weights).reshape(-1)

print(f"rank {hvd.rank()} first loss {first:.4f} final loss {final:.4f} weights "
      f"{' '.join(f'{v:.3f}' for v in w)} mismatch {mismatch} adasum {adasum.shape}")
