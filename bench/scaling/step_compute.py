"""The compute of the step the multihost workload times (bench/suite/launched_worker.py
``--model step``: the ResNet-50-shaped parameter set, SGD with momentum), on one process with
one thread as the multihost runs give each rank: the forward, when each gradient becomes ready
during backward, and the optimizer step.

    OMP_NUM_THREADS=1 python bench/scaling/step_compute.py --reps 15 --copies 2 --json out.json

``--copies N``: N processes profile at once, started together, and the figures are their means:
with one copy per core, the step's compute as it runs when every core computes (the ranks of a
job on this machine do: they then share the memory's bandwidth, which the optimizer's pass over
the parameters and the momentum needs).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(os.path.dirname(HERE), "suite"))
from models import ShapedModel  # noqa: E402


def profile_once(model, x, opt) -> tuple[float, list[float], float]:
    """(forward s, seconds of backward before each gradient in the order they are ready,
    optimizer s) of one step."""
    marks: list[float] = []
    hooks = [p.register_post_accumulate_grad_hook(lambda _p: marks.append(time.perf_counter()))
             for p in model.parameters()]
    opt.zero_grad()
    t0 = time.perf_counter()
    loss = model(x)
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    opt.step()
    t3 = time.perf_counter()
    for h in hooks:
        h.remove()
    gaps = [b - a for a, b in zip([t1] + marks[:-1], marks)]
    gaps[-1] += t2 - marks[-1]      # what backward did after the last hook counts with it
    return t1 - t0, gaps, t3 - t2


def profile(reps: int, barrier) -> dict:
    torch.manual_seed(0)
    model = ShapedModel()
    x = torch.randn(32, 8)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    order = []
    model.zero_grad()
    hooks = [p.register_post_accumulate_grad_hook(lambda p: order.append(p.numel() * 4))
             for p in model.parameters()]
    model(x).backward()
    for h in hooks:
        h.remove()
    if barrier is not None:
        barrier.wait()
    runs = [profile_once(model, x, opt) for _ in range(reps + 2)][2:]
    return {"forward_s": statistics.median(r[0] for r in runs),
            "optimizer_s": statistics.median(r[2] for r in runs),
            "backward_s": [statistics.median(r[1][k] for r in runs) for k in range(len(order))],
            "gradient_bytes": order}


def _copy(reps: int, barrier, results) -> None:
    results.put(profile(reps, barrier))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--copies", type=int, default=1)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    if args.copies == 1:
        copies = [profile(args.reps, None)]
    else:
        ctx = multiprocessing.get_context("spawn")
        barrier, results = ctx.Barrier(args.copies), ctx.Queue()
        procs = [ctx.Process(target=_copy, args=(args.reps, barrier, results))
                 for _ in range(args.copies)]
        for p in procs:
            p.start()
        copies = [results.get(timeout=600) for _ in procs]
        for p in procs:
            p.join()
    out = {"threads": torch.get_num_threads(), "copies": args.copies,
           "load_average": list(os.getloadavg()),
           "forward_s": statistics.fmean(c["forward_s"] for c in copies),
           "optimizer_s": statistics.fmean(c["optimizer_s"] for c in copies),
           "backward_s": [statistics.fmean(c["backward_s"][k] for c in copies)
                          for k in range(len(copies[0]["backward_s"]))],
           "gradient_bytes": copies[0]["gradient_bytes"]}
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)
    print(f"{args.copies} at once: forward {out['forward_s'] * 1e3:.1f} ms, backward "
          f"{sum(out['backward_s']) * 1e3:.1f} ms over {len(out['gradient_bytes'])} gradients, "
          f"optimizer {out['optimizer_s'] * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
