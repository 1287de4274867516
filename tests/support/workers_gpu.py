"""Worker side of the real-GPU tests: each rank on its own GPU (local rank), real CuPy/NCCL."""

from __future__ import annotations

import torch

import fuse.torch as hvd


def _device():
    torch.cuda.set_device(hvd.local_rank())
    return torch.device("cuda", hvd.local_rank())


def collectives():
    """Every collective on CUDA tensors; results on the host only after the checks' end."""
    from fuse.worker import device_path
    dev = _device()
    r, n = hvd.rank(), hvd.size()
    out = {"device_path": device_path.get() is not None}
    t = torch.arange(6, dtype=torch.float32, device=dev) + r
    red = hvd.allreduce(t, name="ar")
    out["allreduce_on_device"] = red.is_cuda
    out["allreduce"] = red.tolist()
    g = [torch.full((3,), float(r + 1), device=dev), torch.full((2, 2), 10.0 * r, device=dev)]
    hvd.grouped_allreduce_(g, op=hvd.Sum, name="gar")
    out["grouped"] = [x.tolist() for x in g]
    out["allgather"] = hvd.allgather(torch.full((r + 1, 2), r, dtype=torch.int32, device=dev),
                                     name="ag").tolist()
    b = torch.full((4,), float(r), device=dev)
    hvd.broadcast_(b, root_rank=n - 1, name="bc")
    out["broadcast"] = b.tolist()
    rows, received = hvd.alltoall(torch.arange(2 * n, dtype=torch.float64, device=dev) + 10 * r,
                                  splits=[2] * n, name="a2a")
    out["alltoall"] = (rows.tolist(), received.tolist())
    out["reducescatter"] = hvd.reducescatter(torch.ones(2 * n, 2, device=dev) * (r + 1),
                                             op=hvd.Sum, name="rs").tolist()
    # a result used right away on the current stream must already hold the reduction
    x = torch.ones(1 << 20, device=dev)
    y = hvd.allreduce(x, op=hvd.Sum, name="big") * 2
    out["stream_order"] = float(y[0].item()) == 2.0 * n
    return out


def training():
    """DistributedOptimizer with the model on the GPU: the replicas stay identical."""
    dev = _device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 1)).to(dev)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    for step in range(5):
        x = torch.randn(4, 8, device=dev) + hvd.rank()
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    return [p.detach().cpu().tolist() for p in model.parameters()]
