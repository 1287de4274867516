"""One small torch training, run the same way by fuserun, by fuse.ray and by fuse.spark: the
integration tests compare the weights each way ends with.

``python workers_integrations_training.py OUT`` (under ``fuserun -np 2``) writes each rank's result to
``OUT.<rank>``.
"""

from __future__ import annotations

import json
import sys


def train(steps: int = 12) -> dict:
    """Train a two-layer net on data that differs per rank; return this rank's identity and
    final weights (lists of floats, exactly as trained)."""
    import torch

    import fuse.torch as hvd

    torch.set_num_threads(1)
    hvd.init()
    torch.manual_seed(1234 + hvd.rank())            # replicas start apart: broadcast must fix it
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * hvd.size(), momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    data = torch.Generator().manual_seed(99 + hvd.rank())     # each rank its own shard
    for _ in range(steps):
        x = torch.randn(16, 6, generator=data)
        y = x.sum(dim=1, keepdim=True).sin()
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return {"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(),
            "local_size": hvd.local_size(), "cross_rank": hvd.cross_rank(),
            "weights": [p.detach().reshape(-1).tolist() for p in model.parameters()]}


if __name__ == "__main__":
    result = train()
    with open(f"{sys.argv[1]}.{result['rank']}", "w") as f:
        json.dump(result, f)
