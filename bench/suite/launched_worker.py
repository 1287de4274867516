"""One side of bench/suite/loaded.py: a training loop started by its launcher the usual way.

    fuserun -np 2 python bench/suite/launched_worker.py --side fuse --model step --json f
    torchrun --nproc_per_node 2 bench/suite/launched_worker.py --side ddp --model step --json f

Unlike the other benchmarks, fuse and DDP do not share a process here: each side runs under
its own launcher with that launcher's defaults (fuserun's thread budget, torchrun's
OMP_NUM_THREADS=1), and nothing in this script sets a thread count. Models: ``step``, the
ResNet-50-shaped parameter set (161 tensors, 25.6 M float32, almost no compute: the gradient
allreduce dominates); ``cnn``, the small CNN on 32 synthetic 32x32 images per worker (compute
dominates); ``allreduce``, one 64 MiB float32 allreduce per step (bandwidth). Rank 0 writes the
step times and the thread settings the workers ran with.

``--powersgd R`` compresses the gradients with PowerSGD at rank R from step ``--start-iter`` on:
fuse's ``Compression.powersgd``, DDP's ``powerSGD_hook`` (the same settings; error feedback and
warm start on in both); the warm-up then runs past the start so that only compressed steps are
timed.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from models import ShapedModel, SmallCNN, synthetic_images  # noqa: E402

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TF_NUM_INTRAOP_THREADS")

ALLREDUCE_BYTES = common.ALLREDUCE_BYTES


def model_and_loss(name: str, rank: int):
    """The model and a function computing its loss on this rank's fixed batch."""
    torch.manual_seed(0)
    if name == "step":
        model = ShapedModel()
        x = torch.randn(32, 8) + rank
        return model, lambda m: m(x)
    model = SmallCNN()
    x, y = synthetic_images(32, seed=rank)
    loss_fn = torch.nn.CrossEntropyLoss()
    return model, lambda m: loss_fn(m(x), y)


def fuse_side(model_name: str, powersgd: int = 0, start_iter: int = 0):
    import fuse.torch as hvd
    hvd.init()
    if model_name == "allreduce":
        buf = torch.ones(ALLREDUCE_BYTES // 4)
        return hvd.rank(), lambda: hvd.allreduce_(buf, op=hvd.Sum, name="buf"), hvd.barrier, \
            hvd.shutdown
    model, loss = model_and_loss(model_name, hvd.rank())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    compression = (hvd.Compression.powersgd(rank=powersgd, start_iter=start_iter)
                   if powersgd else hvd.Compression.none)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9),
                                   named_parameters=model.named_parameters(),
                                   compression=compression)

    def step():
        opt.zero_grad()
        loss(model).backward()
        opt.step()
    return hvd.rank(), step, hvd.barrier, hvd.shutdown


def ddp_side(model_name: str, powersgd: int = 0, start_iter: int = 0):
    import torch.distributed as dist
    dist.init_process_group("gloo")           # torchrun's env:// rendezvous
    rank = dist.get_rank()
    if model_name == "allreduce":
        buf = torch.ones(ALLREDUCE_BYTES // 4)
        return rank, lambda: dist.all_reduce(buf), dist.barrier, dist.destroy_process_group
    base, loss = model_and_loss(model_name, rank)
    # powerSGD_hook on Gloo waits for its P and Q allreduces inside callbacks that run on
    # Gloo's worker threads: with several buckets in flight they take every thread and wait
    # for each other forever (seen on the network-namespace hosts). One bucket keeps it to
    # one chain; the gradient set has almost no backward compute to overlap anyway.
    model = torch.nn.parallel.DistributedDataParallel(
        base, **({"bucket_cap_mb": 1024} if powersgd else {}))
    if powersgd:
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=powersgd,
                                   start_powerSGD_iter=start_iter)
        model.register_comm_hook(state, psgd.powerSGD_hook)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)

    def step():
        opt.zero_grad()
        loss(model).backward()
        opt.step()
    return rank, step, dist.barrier, dist.destroy_process_group


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--side", choices=("fuse", "ddp"), required=True)
    ap.add_argument("--model", choices=("step", "cnn", "allreduce"), default="step")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--json", default=None)
    ap.add_argument("--powersgd", type=int, default=0, help="PowerSGD rank (0: none)")
    ap.add_argument("--start-iter", type=int, default=10, help="PowerSGD's first step")
    args = ap.parse_args()
    if args.powersgd:
        args.warmup = max(args.warmup, args.start_iter + 2)
    threads = {name: os.environ.get(name) for name in THREAD_VARIABLES}
    threads["torch.get_num_threads()"] = torch.get_num_threads()
    rank, step, barrier, close = (fuse_side if args.side == "fuse" else ddp_side)(
        args.model, args.powersgd, args.start_iter)
    times = common.timed_steps(step, barrier, args.warmup, args.steps)
    if rank == 0:
        print(f"{args.side} {args.model}: median step {common.median(times) * 1e3:.1f} ms, "
              f"threads {threads}", flush=True)
        common.write_json(args.json, {"side": args.side, "model": args.model,
                                      "step_seconds": times, "threads": threads,
                                      "powersgd": args.powersgd,
                                      "workers": int(os.environ.get("WORLD_SIZE") or
                                                     os.environ.get("FUSE_SIZE") or 0)})
    close()


if __name__ == "__main__":
    main()
