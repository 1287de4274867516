"""The compute of the step the multihost workload times (bench/suite/launched_worker.py
``--model step``: the ResNet-50-shaped parameter set, SGD with momentum), on one process with
one thread as the multihost runs give each rank: the forward, when each gradient becomes ready
during backward, and the optimizer step.

    OMP_NUM_THREADS=1 python bench/scaling/step_compute.py --reps 15 --json out.json
"""

from __future__ import annotations

import argparse
import json
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
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
    runs = [profile_once(model, x, opt) for _ in range(args.reps + 2)][2:]
    out = {"threads": torch.get_num_threads(), "load_average": list(os.getloadavg()),
           "forward_s": statistics.median(r[0] for r in runs),
           "optimizer_s": statistics.median(r[2] for r in runs),
           "backward_s": [statistics.median(r[1][k] for r in runs) for k in range(len(order))],
           "gradient_bytes": order}
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)
    print(f"forward {out['forward_s'] * 1e3:.1f} ms, backward "
          f"{sum(out['backward_s']) * 1e3:.1f} ms over {len(order)} gradients, optimizer "
          f"{out['optimizer_s'] * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
