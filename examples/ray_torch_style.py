"""A Horovod-on-Ray PyTorch script (synthetic regression data, a small MLP).

Written exactly as for Horovod; only the imports differ:
    from horovod.ray import RayExecutor   ->   from fuse.ray import RayExecutor
    import horovod.torch as hvd           ->   import fuse.torch as hvd

Run:  python examples/ray_torch_style.py --num-workers 2        (starts a local Ray)
      RAY_ADDRESS=<head>:6379 python examples/ray_torch_style.py  (an existing cluster)
"""

import argparse

import ray
import torch

import fuse.torch as hvd
from fuse.ray import RayExecutor


def train_fn(epochs=3, lr=0.01):
    hvd.init()
    torch.manual_seed(hvd.rank())
    model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr * hvd.size(), momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    g = torch.Generator().manual_seed(100 + hvd.rank())      # this rank's shard
    x = torch.randn(256, 10, generator=g)
    y = x @ torch.linspace(-1, 1, 10).unsqueeze(1) + 0.5
    for epoch in range(epochs):
        for i in range(0, len(x), 32):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x[i:i + 32]), y[i:i + 32])
            loss.backward()
            optimizer.step()
        loss = hvd.allreduce(loss.detach(), name="loss").item()
        if hvd.rank() == 0:
            print(f"epoch {epoch}: loss {loss:.4f}", flush=True)
    checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
    return hvd.rank(), loss, checksum


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()

    ray.init()      # RAY_ADDRESS, when set, names the cluster to join
    settings = RayExecutor.create_settings(timeout_s=30)
    executor = RayExecutor(settings, num_workers=args.num_workers, use_gpu=False)
    executor.start()
    results = executor.run(train_fn, kwargs=dict(epochs=args.epochs))
    executor.shutdown()
    ranks = [r[0] for r in results]
    assert len({r[2] for r in results}) == 1, f"the replicas diverged: {results}"
    print(f"ranks {ranks} agree: final loss {results[0][1]:.4f}, weight checksum "
          f"{results[0][2]:.6f}")
