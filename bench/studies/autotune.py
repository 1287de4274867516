"""Autotune against a grid search: does FUSE_AUTOTUNE end near the best fixed setting?

    python bench/studies/autotune.py [--np 2 --steps 7 --json out.json]

A step allreduces ResNet-50's 161 gradient shapes (numpy float32, 25.6 M values; see
``resnet50_shapes`` in bench/suite/common.py) asynchronously and waits for all of them.

1. Grid: one job walks fixed settings (fusion threshold x cycle time x response cache), set on
   the coordinator with ``Engine.tuning.set``; per setting, 2 warm-up steps then the median of
   ``--steps`` step times.
2. Autotune: a fresh job with FUSE_AUTOTUNE=1 runs steps until the tuner is done (default
   sample counts), then times ``--steps`` steps with the values it fixed.

Reported: the best grid setting and its step time, the autotuned values and step time, and
their ratio.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
SUITE = os.path.join(BENCH, "suite")
MIB = 1024 * 1024
GRID = list(itertools.product([0, MIB // 4, MIB, 4 * MIB, 16 * MIB, 64 * MIB],
                              [0.0, 1.0, 5.0], [True, False]))


def _setup():
    sys.path.insert(0, SUITE)
    from common import resnet50_shapes

    import fuse
    grads = [np.full(s, 0.01 * (i + 1), np.float32) for i, s in enumerate(resnet50_shapes())]

    def step():
        handles = [fuse.allreduce_async_(g, name=f"g.{i}", op=fuse.Average)
                   for i, g in enumerate(grads)]
        for h in handles:
            fuse.synchronize(h)

    return fuse, step


def _timed(fuse, step, steps):
    fuse.barrier()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def grid_worker(steps):
    fuse, step = _setup()
    fuse.init()
    from fuse.worker import state as job_state
    engine = job_state.engine()
    out = []
    for threshold, cycle, cache in GRID:
        engine.tuning.set(threshold, cycle, cache)
        step()
        step()
        out.append((threshold, cycle, cache, _timed(fuse, step, steps)))
    fuse.shutdown()
    return out


def autotune_worker(steps, log):
    fuse, step = _setup()
    fuse.init(autotune=True, autotune_log=log)
    start = time.perf_counter()
    n = 0
    while True:
        step()
        n += 1
        state = fuse.autotune_state()
        flag = np.array([1 if state is not None and state["done"] else 0], np.int32)
        if fuse.allreduce(flag, name="done", op=fuse.Sum)[0]:
            break
    tuning_s = time.perf_counter() - start
    state = fuse.broadcast_object(fuse.autotune_state(), root_rank=0)
    final = _timed(fuse, step, steps)
    fuse.shutdown()
    return {"state": state, "step_s": final, "tuning_steps": n, "tuning_s": tuning_s}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import fuse
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("FUSE_") or k.startswith("HOROVOD_"))}
    env["FUSE_BACKEND"] = "gloo"
    grid = fuse.run(grid_worker, args=(args.steps,), np=args.np, env=env)[0]
    log = os.path.join(tempfile.mkdtemp(prefix="fuse-autotune-bench."), "autotune.csv")
    tuned = fuse.run(autotune_worker, args=(args.steps, log), np=args.np, env=env)[0]

    for threshold, cycle, cache, t in sorted(grid, key=lambda r: r[3]):
        print(f"grid  fusion {threshold / MIB:7.2f} MiB  cycle {cycle:4.1f} ms  "
              f"cache {'on ' if cache else 'off'}  step {t * 1000:7.1f} ms")
    best = min(grid, key=lambda r: r[3])
    st = tuned["state"]
    print(f"best grid: fusion {best[0] / MIB:.2f} MiB, cycle {best[1]:.1f} ms, cache "
          f"{best[2]}: {best[3] * 1000:.1f} ms/step")
    print(f"autotune:  fusion {st['fusion_threshold'] / MIB:.2f} MiB, cycle "
          f"{st['cycle_time_ms']:.2f} ms, cache {st['cache_enabled']}: "
          f"{tuned['step_s'] * 1000:.1f} ms/step after {st['samples']} samples, "
          f"{tuned['tuning_steps']} steps, {tuned['tuning_s']:.1f} s of tuning")
    print(f"autotune / best grid: {tuned['step_s'] / best[3]:.3f}")
    print(f"sample log: {log}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"grid": grid, "autotune": tuned, "ratio": tuned["step_s"] / best[3]},
                      f, indent=1)


if __name__ == "__main__":
    main()
