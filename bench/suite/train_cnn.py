"""End-to-end synthetic training of a small CNN: samples per second, fuse vs DDP.

    fuserun -np 2 python bench/suite/train_cnn.py [--json f]

The model is ``models.SmallCNN`` (3 conv layers, 32x32 RGB synthetic images, 10 classes),
trained with SGD + momentum and cross-entropy, ``--batch`` images per worker per micro-step
(weak scaling: the global batch grows with the workers).  Each worker uses one torch thread.

With ``backward_passes_per_step`` b, a step is b forward/backward micro-steps then one optimizer
step: fuse's ``DistributedOptimizer(backward_passes_per_step=b)`` allreduces once per step; DDP
runs the first b-1 backward passes under ``no_sync()``.  For every b in ``--bpps``, three sides
alternate in rounds (barrier before each): fuse on 2 workers, DDP on 2 workers, and 1 worker:
rank 0 trains a plain PyTorch model alone (no fuse or DDP calls) while rank 1 waits in the next
barrier (asleep: fuse's wait blocks on a condition variable).  Measuring the 1-worker baseline
in the same job, between the 2-worker runs, keeps the scaling efficiency from comparing two
different moments of a shared machine.  A measurement times ``--micro-steps`` micro-steps.
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
            skip_allreduce = no_sync is not None and micro < bpps - 1
            with no_sync() if skip_allreduce else contextlib.nullcontext():
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
    ap.add_argument("--bpps", default="1,4", help="backward_passes_per_step values")
    ap.add_argument("--batch", type=int, default=32, help="images per worker per micro-step")
    ap.add_argument("--micro-steps", type=int, default=16, help="micro-steps per measurement")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    bpps_values = [int(b) for b in args.bpps.split(",")]
    torch.set_num_threads(1)
    torch.manual_seed(0)

    import fuse.torch as hvd
    from torch_step import init_torch_distributed
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    dist = init_torch_distributed()
    x, y = synthetic_images(args.batch, seed=rank)

    rows = []
    for bpps in bpps_values:
        steps = max(1, args.micro_steps // bpps)
        fuse_model, ddp_base, alone = SmallCNN(), SmallCNN(), SmallCNN()
        ddp_base.load_state_dict(fuse_model.state_dict())
        fuse_opt = hvd.DistributedOptimizer(sgd(fuse_model),
                                            named_parameters=fuse_model.named_parameters(),
                                            backward_passes_per_step=bpps)
        ddp = torch.nn.parallel.DistributedDataParallel(ddp_base)
        fuse_step = make_trainer(fuse_model, fuse_opt, x, y, bpps)
        ddp_step = make_trainer(ddp, sgd(ddp), x, y, bpps, no_sync=ddp.no_sync)
        alone_step = make_trainer(alone, sgd(alone), x, y, bpps)
        for step in (fuse_step, ddp_step, alone_step):      # warm-up
            step()
            step()
        per_step = args.batch * bpps
        sides = {"fuse": lambda: samples_per_second(fuse_step, steps, per_step * size),
                 "DDP": lambda: samples_per_second(ddp_step, steps, per_step * size),
                 # rank 0 alone; the other ranks go straight on to the next barrier
                 "1 worker": lambda: (samples_per_second(alone_step, steps, per_step)
                                      if rank == 0 else 0.0)}
        samples = common.alternating_rounds(sides, args.rounds, hvd.barrier)
        rows.append(common.comparison(
            f"small CNN, backward_passes_per_step {bpps}", samples, unit="samples/s",
            competitor="DDP", lower_is_better=False, workers=size, bpps=bpps,
            scaling_efficiency={k: common.scaling_efficiency(common.median(samples[k]),
                                                      common.median(samples["1 worker"]), size)
                                for k in ("fuse", "DDP")}))
    params = sum(p.numel() for p in SmallCNN().parameters())
    if rank == 0:
        for row in rows:
            meds = ", ".join(f"{k} {v:8.1f}" for k, v in row["median"].items())
            eff = ", ".join(f"{k} {v:.0%}" for k, v in row["scaling_efficiency"].items())
            print(f"{row['case']}: samples/s {meds}; ratio fuse/DDP {row['ratio']:.3f}; "
                  f"scaling efficiency {eff}")
        common.write_json(args.json, common.job_record(
            "train_cnn", rows, machine.describe(),
            vars(args) | {"workers": size, "parameters": params}))
    dist.destroy_process_group()
    hvd.shutdown()


if __name__ == "__main__":
    main()
