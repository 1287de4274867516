"""Data-parallel training of a small two-layer network in plain NumPy, Horovod style.

    fuserun -np 2 python examples/train_numpy.py

Every worker starts from rank 0's weights, trains on its own shard of a synthetic
classification problem, and averages its gradients with the others through fuse after each
step, so all workers hold the same model throughout.
"""

import argparse
import time

import numpy as np

import fuse


def make_data(n, features, classes, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=3.0, size=(classes, features))
    labels = rng.integers(0, classes, size=n)
    x = centers[labels] + rng.normal(size=(n, features))
    return x.astype(np.float32), labels


def forward(params, x):
    w1, b1, w2, b2 = params
    h = np.maximum(x @ w1 + b1, 0.0)
    logits = h @ w2 + b2
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    return h, p


def gradients(params, x, y):
    w1, b1, w2, b2 = params
    h, p = forward(params, x)
    n = len(x)
    loss = -np.log(p[np.arange(n), y] + 1e-9).mean()
    d = p.copy()
    d[np.arange(n), y] -= 1.0
    d /= n
    gw2 = h.T @ d
    gb2 = d.sum(axis=0)
    dh = (d @ w2.T) * (h > 0)
    gw1 = x.T @ dh
    gb1 = dh.sum(axis=0)
    return loss, [gw1, gb1, gw2, gb2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()

    fuse.init()
    rank, size = fuse.rank(), fuse.size()

    features, hidden, classes = 20, 64, 5
    x, y = make_data(8192 + 2048, features, classes)
    x_test, y_test = x[8192:], y[8192:]
    x, y = x[:8192], y[:8192]
    shard = slice(rank, None, size)                 # each worker its own part of the data
    x, y = x[shard], y[shard]

    rng = np.random.default_rng(1234 + rank)        # deliberately different on every rank ...
    params = [rng.normal(scale=0.1, size=(features, hidden)).astype(np.float32),
              np.zeros(hidden, np.float32),
              rng.normal(scale=0.1, size=(hidden, classes)).astype(np.float32),
              np.zeros(classes, np.float32)]
    for i, p in enumerate(params):                  # ... until rank 0's weights are broadcast
        fuse.broadcast_(p, root_rank=0, name=f"param.{i}")

    start = time.perf_counter()
    steps = len(x) // args.batch_size
    for epoch in range(args.epochs):
        order = np.random.default_rng(epoch * size + rank).permutation(len(x))
        losses = []
        for step in range(steps):
            idx = order[step * args.batch_size:(step + 1) * args.batch_size]
            loss, grads = gradients(params, x[idx], y[idx])
            grads = fuse.grouped_allreduce(grads, op=fuse.Average, name="grads")
            for p, g in zip(params, grads):
                p -= args.lr * g
            losses.append(loss)
        mean_loss = fuse.allreduce(np.array([np.mean(losses)]), name="loss")[0]
        if rank == 0:
            print(f"epoch {epoch + 1}: loss {mean_loss:.4f}", flush=True)
    elapsed = time.perf_counter() - start

    # Every worker must hold the same model.
    digest = np.array([float(sum(p.astype(np.float64).sum() for p in params))])
    digests = fuse.allgather(digest, name="digest")
    assert np.all(digests == digests[0]), f"workers diverged: {digests}"
    _, probs = forward(params, x_test)
    accuracy = float((probs.argmax(axis=1) == y_test).mean())
    if rank == 0:
        print(f"trained {args.epochs} epochs on {size} workers in {elapsed:.2f} s; "
              f"test accuracy {accuracy:.3f}; all workers hold identical weights")
    fuse.shutdown()


if __name__ == "__main__":
    main()
