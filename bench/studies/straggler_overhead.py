"""What the straggler meter costs the engine: a step of many small allreduces with
``FUSE_STRAGGLER_POLICY=off`` (no meter) and ``warn`` (the default: the meter on).

    fuserun -np 2 python bench/studies/straggler_overhead.py [--rounds 8 --steps 30 --json f]

A step is ResNet-50's 161 gradient tensors, each cut down to ``--numel`` float32 values
(default 256: 1 KiB), submitted with ``allreduce_async`` and then synchronized: per-request
work in the coordinator dominates, which is where the meter adds its bookkeeping (a clock
read and a few additions per request, a median once a second).  Rounds alternate the two
settings in one process (``shutdown()`` then ``init(straggler_policy=...)``); reported (rank
0): the median step time of each, their ratio, and the median of the rounds' paired ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

SUITE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "suite")
sys.path.insert(0, SUITE)  # the suite's shared modules (common, machine, models, ...)
import common  # noqa: E402

import fuse  # noqa: E402


def step(tensors: list[np.ndarray]) -> None:
    handles = [fuse.allreduce_async(t, name=f"g{i}") for i, t in enumerate(tensors)]
    for h in handles:
        fuse.synchronize(h)


def round_time(policy: str, tensors, steps: int) -> float:
    fuse.init(straggler_policy=policy)
    try:
        for _ in range(3):
            step(tensors)
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            step(tensors)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)
    finally:
        fuse.shutdown()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--numel", type=int, default=256)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    n = len(common.resnet50_shapes())
    tensors = [np.ones(args.numel, dtype=np.float32) for _ in range(n)]
    samples = {"off": [], "warn": []}
    load = os.getloadavg()[0]
    for r in range(args.rounds):
        for policy in (("off", "warn") if r % 2 == 0 else ("warn", "off")):
            samples[policy].append(round_time(policy, tensors, args.steps))
    if int(os.environ.get("FUSE_RANK", "0")) != 0:
        return
    off, warn = statistics.median(samples["off"]), statistics.median(samples["warn"])
    out = {"tensors": n, "numel": args.numel, "rounds": args.rounds, "steps": args.steps,
           "off_step_ms": off * 1000, "warn_step_ms": warn * 1000, "warn_over_off": warn / off,
           # each round's two settings ran back to back: their ratio cancels slow drifts of load
           "median_paired_ratio": statistics.median(
               w / o for w, o in zip(samples["warn"], samples["off"])),
           "samples_ms": {k: [v * 1000 for v in vs] for k, vs in samples.items()},
           "load_1min_start": load, "load_1min_end": os.getloadavg()[0]}
    print(json.dumps(out, indent=1))
    common.write_json(args.json, out)


if __name__ == "__main__":
    main()
