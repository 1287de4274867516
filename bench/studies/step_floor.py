"""The floor of the ResNet-50-shaped gradient step, measured, beside fuse's and DDP's steps.

    fuserun -np 2 python bench/studies/step_floor.py [--rounds 6] [--steps 5] [--json f]

The step of bench/suite/torch_step.py (zero_grad, forward, backward, SGD with momentum over 161
tensors, 25.6 M float32) cannot take less than the work no synchronisation scheme avoids:

* ``forward+backward``: the same model's pass with no hooks (it reads every parameter and
  writes every gradient);
* ``reduce traffic``: the memory traffic of a 2-rank same-host allreduce of the gradients done
  at memcpy speed: each rank sums its half of the buffer from its own copy and its peer's
  (numpy ``add`` into place) and writes the result into the peer's copy (``copyto``), both ranks
  at once, as the shared-memory path does; on the same machine memory bandwidth is shared, so
  this is timed with both ranks running it together;
* ``optimizer``: the SGD-with-momentum step alone on the gradients.

The floor is their sum.  In the same run (rounds alternating the order, barrier before each),
the full fuse step (DistributedOptimizer) and DDP step are timed, with their CPU time per step
(getrusage of the process: every thread, load-independent).  Reported: medians over rounds
and fuse/floor, fuse/DDP.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

import numpy as np
import torch

SUITE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "suite")
sys.path.insert(0, SUITE)  # the suite's shared modules (common, machine, models, ...)
import common  # noqa: E402
import machine  # noqa: E402
from models import ShapedModel  # noqa: E402
from torch_step import init_torch_distributed  # noqa: E402

import fuse.torch as hvd  # noqa: E402


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(fn, steps: int) -> tuple[float, float]:
    """Median wall time of ``steps`` calls, and CPU seconds (all threads) per call."""
    walls, c0 = [], cpu_seconds()
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
    return common.median(walls), (cpu_seconds() - c0) / steps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    dist = init_torch_distributed()
    x = torch.randn(32, 8) + rank

    plain = ShapedModel()
    plain_opt = torch.optim.SGD(plain.parameters(), lr=1e-4, momentum=0.9)
    fuse_model = ShapedModel()
    fuse_opt = hvd.DistributedOptimizer(
        torch.optim.SGD(fuse_model.parameters(), lr=1e-4, momentum=0.9),
        named_parameters=fuse_model.named_parameters())
    ddp_model = torch.nn.parallel.DistributedDataParallel(ShapedModel())
    ddp_opt = torch.optim.SGD(ddp_model.parameters(), lr=1e-4, momentum=0.9)
    n_values = sum(p.numel() for p in plain.parameters())
    mine = np.ones(n_values, np.float32)
    peers = np.ones(n_values, np.float32)
    lo, hi = rank * n_values // size, (rank + 1) * n_values // size

    def forward_backward():
        plain_opt.zero_grad()
        plain(x).backward()

    def reduce_traffic():
        np.add(mine[lo:hi], peers[lo:hi], out=mine[lo:hi])
        np.copyto(peers[lo:hi], mine[lo:hi])

    def optimizer():
        plain_opt.step()

    def step(model, opt):
        opt.zero_grad()
        model(x).backward()
        opt.step()

    forward_backward()
    parts = {"forward+backward": forward_backward, "reduce traffic": reduce_traffic,
             "optimizer": optimizer,
             "fuse step": lambda: step(fuse_model, fuse_opt),
             "DDP step": lambda: step(ddp_model, ddp_opt)}
    for fn in parts.values():
        for _ in range(2):
            fn()
    cpu = {label: [] for label in parts}

    def measure(label):
        wall, c = timed(parts[label], args.steps)
        cpu[label].append(c)
        return wall

    samples = common.alternating_rounds({lb: (lambda lb=lb: measure(lb)) for lb in parts},
                                        args.rounds, hvd.barrier)
    med = {lb: common.median(v) for lb, v in samples.items()}
    cpu_med = {lb: common.median(v) for lb, v in cpu.items()}
    floor = med["forward+backward"] + med["reduce traffic"] + med["optimizer"]
    if rank == 0:
        print(f"ResNet-50-shaped step, {n_values / 1e6:.1f} M float32, {size} ranks, "
              f"load {os.getloadavg()[0]:.2f}")
        for lb in parts:
            print(f"  {lb:>18}: {med[lb] * 1e3:8.1f} ms  (CPU {cpu_med[lb] * 1e3:7.1f} ms/step)")
        print(f"  {'floor':>18}: {floor * 1e3:8.1f} ms")
        print(f"  fuse/floor {med['fuse step'] / floor:.3f}   fuse/DDP "
              f"{med['fuse step'] / med['DDP step']:.3f}   DDP/floor "
              f"{med['DDP step'] / floor:.3f}")
        rows = [{"case": lb, "unit": "s", "median": med[lb], "samples": samples[lb],
                 "cpu_per_step_s": cpu_med[lb]} for lb in parts]
        common.write_json(args.json, common.job_record(
            "step_floor", rows, machine.describe(), vars(args) | {"workers": size},
            floor_s=floor, fuse_over_floor=med["fuse step"] / floor,
            fuse_over_ddp=med["fuse step"] / med["DDP step"]))
    dist.destroy_process_group()
    hvd.shutdown()


if __name__ == "__main__":
    main()
