"""What writing the timeline costs: gradient-sync steps with the timeline off vs on, same run.

    fuserun -np 2 python bench/studies/timeline.py [--rounds 7 --steps 5 --json out.json]

A step allreduces ResNet-50's 161 gradient shapes (numpy float32, 25.6 M values; see
``resnet50_shapes`` in bench/suite/common.py) asynchronously and waits for all of them, the way
DistributedOptimizer does.  A second case does the same with 161 tiny tensors (4 floats each),
where per-event costs weigh most.  Each round measures both modes, alternating which goes
first; the timeline is switched with start_timeline/stop_timeline (rank 0 writes, with cycle
markers on).  Reported: median step time per mode and the ratio on/off.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

SUITE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "suite")
sys.path.insert(0, SUITE)  # the suite's shared modules (common, machine, models, ...)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--tiny-steps", type=int, default=50)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    from common import resnet50_shapes

    import fuse
    fuse.init()
    rank = fuse.rank()
    shapes = resnet50_shapes()
    grads = [np.full(s, 0.01 * (i + 1), np.float32) for i, s in enumerate(shapes)]
    tiny = [np.ones(4, np.float32) for _ in shapes]
    path = os.path.join(tempfile.mkdtemp(prefix="fuse-timeline-bench."), "timeline.json")

    def step(tensors, prefix):
        handles = [fuse.allreduce_async_(t, name=f"{prefix}.{i}", op=fuse.Average)
                   for i, t in enumerate(tensors)]
        for h in handles:
            fuse.synchronize(h)

    def timed(tensors, prefix, steps, on):
        fuse.barrier()
        if on:
            fuse.start_timeline(path, mark_cycles=True)
        start = time.perf_counter()
        for _ in range(steps):
            step(tensors, prefix)
        elapsed = (time.perf_counter() - start) / steps
        if on:
            fuse.stop_timeline()
        return elapsed

    cases = {"resnet50_grads": (grads, "g", args.steps),
             "tiny_x161": (tiny, "t", args.tiny_steps)}
    for name, (tensors, prefix, steps) in cases.items():    # warm up (and fill the cache)
        timed(tensors, prefix, 2, False)
        timed(tensors, prefix, 2, True)
    results = {name: {"off": [], "on": []} for name in cases}
    for rnd in range(args.rounds):
        for name, (tensors, prefix, steps) in cases.items():
            order = (False, True) if rnd % 2 == 0 else (True, False)
            for on in order:
                results[name]["on" if on else "off"].append(timed(tensors, prefix, steps, on))

    summary = {}
    for name, r in results.items():
        off, on = statistics.median(r["off"]), statistics.median(r["on"])
        summary[name] = {"off_s": off, "on_s": on, "ratio_on_over_off": on / off,
                         "off_all": r["off"], "on_all": r["on"]}
    size = os.path.getsize(path) if rank == 0 and os.path.exists(path) else 0
    if rank == 0:
        for name, s in summary.items():
            print(f"{name}: timeline off {s['off_s'] * 1e3:.2f} ms/step, on "
                  f"{s['on_s'] * 1e3:.2f} ms/step, ratio on/off {s['ratio_on_over_off']:.3f}")
        print(f"last timeline file: {size} bytes ({path})")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({**summary, "workers": fuse.size(), "cores": os.cpu_count()}, f,
                          indent=2)
    fuse.shutdown()


if __name__ == "__main__":
    main()
