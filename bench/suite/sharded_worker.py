"""One job of bench/suite/sharded.py: AdamW training steps on a parameter set, timed, with the
optimizer state and peak memory of every rank.

    fuserun -np N python bench/suite/sharded_worker.py --side fuse_sharded --model resnet50 --json f
    torchrun --nproc_per_node N bench/suite/sharded_worker.py --side ddp_zero --model transformer --json f

Sides: ``fuse`` (``DistributedOptimizer``), ``fuse_sharded`` (``DistributedOptimizer(...,
sharded=True)``), ``ddp`` (``DistributedDataParallel`` on Gloo) and ``ddp_zero`` (DDP with
``torch.distributed.optim.ZeroRedundancyOptimizer``).  Models (bench/suite/models.py): the
ResNet-50-shaped and the transformer-shaped parameter sets, almost no compute, so a step is
the gradients' reduction, the optimizer's update and (sharded) the parameters' allgather.
Every rank writes ``<json>.<rank>``: its step times, the bytes of the optimizer state it holds
(every tensor in the state of the optimizer that steps on this rank) and its peak RSS after
the steps (``ru_maxrss``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from models import ShapedModel  # noqa: E402

SIDES = ("fuse", "fuse_sharded", "ddp", "ddp_zero")
LR = 1e-4


def state_bytes(state) -> int:
    """Bytes of every tensor in an optimizer's ``state`` (parameter -> dict)."""
    return sum(v.numel() * v.element_size() for per_param in state.values()
               for v in per_param.values() if torch.is_tensor(v))


def batch_for(rank: int) -> torch.Tensor:
    return torch.randn(32, 8, generator=torch.Generator().manual_seed(rank)) + rank


def fuse_side(model_name: str, sharded: bool):
    import fuse.torch as hvd
    hvd.init()
    torch.manual_seed(0)
    model = ShapedModel(model_name)
    x = batch_for(hvd.rank())
    opt = hvd.DistributedOptimizer(torch.optim.AdamW(model.parameters(), lr=LR),
                                   named_parameters=model.named_parameters(), sharded=sharded)

    def step():
        opt.zero_grad()
        model(x).backward()
        opt.step()
    return hvd.rank(), step, lambda: state_bytes(opt.state), hvd.barrier, hvd.shutdown


def ddp_side(model_name: str, zero: bool):
    import torch.distributed as dist
    from torch.distributed.optim import ZeroRedundancyOptimizer
    dist.init_process_group("gloo")           # torchrun's env:// rendezvous
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(ShapedModel(model_name))
    x = batch_for(rank)
    if zero:
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW,
                                      lr=LR)
        held = lambda: state_bytes(opt.optim.state)  # noqa: E731 (this rank's shard)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=LR)
        held = lambda: state_bytes(opt.state)  # noqa: E731

    def step():
        opt.zero_grad()
        model(x).backward()
        opt.step()
    return rank, step, held, dist.barrier, dist.destroy_process_group


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--side", choices=SIDES, required=True)
    ap.add_argument("--model", choices=ShapedModel.SHAPES, default="resnet50")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    if args.side.startswith("fuse"):
        rank, step, held, barrier, close = fuse_side(args.model, args.side == "fuse_sharded")
    else:
        rank, step, held, barrier, close = ddp_side(args.model, args.side == "ddp_zero")
    times = common.timed_steps(step, barrier, args.warmup, args.steps)
    record = {"side": args.side, "model": args.model, "rank": rank, "step_seconds": times,
              "median_step_s": common.median(times), "state_bytes": held(),
              # Linux reports ru_maxrss in KiB
              "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
              "threads": torch.get_num_threads()}
    with open(f"{args.json}.{rank}", "w") as f:
        json.dump(record, f)
    close()


if __name__ == "__main__":
    main()
