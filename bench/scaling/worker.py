"""The collectives the scaling model's parameters come from, timed on NumPy arrays (no
framework, so that 64 ranks fit in memory).  Started by bench/scaling/measure.py:

    fuserun -np N python bench/scaling/worker.py --sizes 4,1M,16M --reps 7 --burst 1,32,161 \
        --json out.json

``--sizes``: one float32 sum allreduce per size, ``--reps`` times after two untimed ones, every
rank passing a barrier before each; the median time per size. ``--uncached``: from 1 MiB up, each
call on the next of enough buffers of that size to fill four times the last-level cache, so
that none is in the cache when its turn comes (a training step's gradients are not). ``--no-inline``: every allreduce
through the backend's ring (FUSE_INLINE_THRESHOLD=0), so that a tiny one shows the ring's
per-message cost. ``--burst K,...``: K asynchronous 4-byte allreduces started back to back, then
waited for: the slope over K is the engine's cost per tensor, the time of one its cost per
collective. Rank 0 writes the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

import fuse

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
UNCACHED_FROM = 1 << 20


def parse_size(text: str) -> int:
    text = text.strip()
    if text[-1] in UNITS:
        return int(float(text[:-1]) * UNITS[text[-1]])
    return int(text)


def timed(fn, reps: int) -> float:
    """The median wall time of ``fn`` over ``reps`` calls after two untimed ones, all ranks
    starting each call together."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(reps):
        fuse.barrier()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def cache_bytes() -> int:
    """The last-level cache's size (Linux's sysfs; 32 MiB when it does not say)."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    sizes = []
    for index in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        try:
            with open(os.path.join(base, index, "size")) as f:
                sizes.append(parse_size(f.read().strip()))
        except (OSError, ValueError):
            continue
    return max(sizes, default=32 << 20)


def allreduce_of(nbytes: int, name: str, uncached: bool = False):
    count = -(-4 * cache_bytes() // nbytes) if uncached and nbytes >= UNCACHED_FROM else 1
    bufs = [np.ones(max(1, nbytes // 4), dtype=np.float32) for _ in range(count)]
    turn = iter(range(1 << 62))
    return lambda: fuse.allreduce_(bufs[next(turn) % count], op=fuse.Sum, name=name)


def burst_of(count: int, tag: str):
    bufs = [np.ones(1, dtype=np.float32) for _ in range(count)]

    def run():
        handles = [fuse.allreduce_async_(b, op=fuse.Sum, name=f"{tag}.{k}")
                   for k, b in enumerate(bufs)]
        for h in handles:
            fuse.synchronize(h)
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="")
    ap.add_argument("--burst", default="")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--no-inline", action="store_true")
    ap.add_argument("--uncached", action="store_true")
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    if args.no_inline:
        os.environ["FUSE_INLINE_THRESHOLD"] = "0"    # read by init(), the same on every rank
    fuse.init()
    out = {"ranks": fuse.size(), "local_ranks": fuse.local_size(), "allreduce": {},
           "burst": {}, "load_average": list(os.getloadavg())}
    for text in filter(None, args.sizes.split(",")):
        n = parse_size(text)
        out["allreduce"][str(n)] = timed(allreduce_of(n, f"ar{n}", args.uncached), args.reps)
    for text in filter(None, args.burst.split(",")):
        k = int(text)
        out["burst"][str(k)] = timed(burst_of(k, f"burst{k}"), args.reps)
    if fuse.rank() == 0:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    fuse.shutdown()


if __name__ == "__main__":
    main()
