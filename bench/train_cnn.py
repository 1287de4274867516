"""End-to-end synthetic training of a small CNN: samples per second, fuse vs DDP.

    python bench/train_cnn.py --single [--json f]          # 1 worker, plain PyTorch, no fuse
    fuserun -np 2 python bench/train_cnn.py [--json f]     # 2 workers: fuse vs DDP (gloo)

The model is ``models.SmallCNN`` (3 conv layers, 32x32 RGB synthetic images, 10 classes),
trained with SGD + momentum and cross-entropy, ``--batch`` images per worker per micro-step
(weak scaling: the global batch grows with the workers).  Each worker uses one torch thread.

With ``backward_passes_per_step`` b, a step is b forward/backward micro-steps then one optimizer
step: fuse's ``DistributedOptimizer(backward_passes_per_step=b)`` allreduces once per step; DDP
runs the first b-1 backward passes under ``no_sync()``.  For every b in ``--bpps``, fuse and DDP
alternate in rounds (barrier before each); a measurement times ``--micro-steps`` micro-steps.
Reported: global samples per second (all workers), medians over rounds, ratio fuse/DDP.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import machine  # noqa: E402
from models import SmallCNN, synthetic_images  # noqa: E402


def make_trainer(model, optimizer, x, y, bpps: int, no_sync=None):
    """A function running one step (``bpps`` micro-steps, then the optimizer step)."""
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        optimizer.zero_grad()
        for micro in range(bpps):
            # DDP: skip the allreduce on all but the last micro-step
            ctx = no_sync() if no_sync is not None and micro < bpps - 1 else contextlib.nullcontext()
            with ctx:
                (loss_fn(model(x), y) / bpps).backward()
        optimizer.step()
    return step


def samples_per_second(step, steps: int, samples_per_step: int) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return steps * samples_per_step / (time.perf_counter() - t0)


def sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--single", action="store_true", help="1 worker, plain PyTorch, no fuse")
    ap.add_argument("--bpps", default="1,4", help="backward_passes_per_step values")
    ap.add_argument("--batch", type=int, default=32, help="images per worker per micro-step")
    ap.add_argument("--micro-steps", type=int, default=16, help="micro-steps per measurement")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    bpps_values = [int(b) for b in args.bpps.split(",")]
    torch.set_num_threads(1)
    torch.manual_seed(0)

    if args.single:
        rank, size, barrier = 0, 1, (lambda: None)
    else:
        import fuse.torch as hvd
        from torch_step import init_torch_distributed
        hvd.init()
        rank, size, barrier = hvd.rank(), hvd.size(), hvd.barrier
        dist = init_torch_distributed()
    x, y = synthetic_images(args.batch, seed=rank)

    rows = []
    for bpps in bpps_values:
        steps = max(1, args.micro_steps // bpps)
        global_samples = args.batch * bpps * size
        sides = {}
        if args.single:
            model = SmallCNN()
            sides["torch, 1 worker"] = make_trainer(model, sgd(model), x, y, bpps)
        else:
            fuse_model, ddp_base = SmallCNN(), SmallCNN()
            ddp_base.load_state_dict(fuse_model.state_dict())
            fuse_opt = hvd.DistributedOptimizer(sgd(fuse_model),
                                                named_parameters=fuse_model.named_parameters(),
                                                backward_passes_per_step=bpps)
            ddp = torch.nn.parallel.DistributedDataParallel(ddp_base)
            sides["fuse"] = make_trainer(fuse_model, fuse_opt, x, y, bpps)
            sides["DDP"] = make_trainer(ddp, sgd(ddp), x, y, bpps, no_sync=ddp.no_sync)
        for step in sides.values():                 # warm-up
            step()
            step()
        samples = common.alternating_rounds(
            {label: (lambda s=s: samples_per_second(s, steps, global_samples))
             for label, s in sides.items()}, args.rounds, barrier)
        rows.append(common.comparison(f"small CNN, {size} worker{'s' * (size > 1)}, "
                                      f"backward_passes_per_step {bpps}", samples,
                                      unit="samples/s", lower_is_better=False,
                                      workers=size, bpps=bpps))
    params = sum(p.numel() for p in SmallCNN().parameters())
    if rank == 0:
        for row in rows:
            meds = ", ".join(f"{k} {v:8.1f}" for k, v in row["median"].items())
            extra = f", ratio fuse/DDP {row['ratio']:.3f}" if row.get("ratio") else ""
            print(f"{row['case']}: samples/s {meds}{extra}")
        common.write_json(args.json, common.job_record(
            f"train_cnn_{size}w", rows, machine.describe(),
            vars(args) | {"workers": size, "parameters": params}))
    if not args.single:
        dist.destroy_process_group()
        hvd.shutdown()


if __name__ == "__main__":
    main()
