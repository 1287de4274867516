"""Raw speed of the Gloo binding, without the engine: 4-byte allreduce latency and 64 MiB float32
allreduce time/bandwidth, for each allreduce algorithm the binding offers.

    python bench/studies/gloo_raw.py [-np 2] [--reps 7] [--algorithms ring,bcube]

Starts the ranks itself (spawn) and rendezvouses through a FileStore in a temporary directory.
Prints the median of --reps timed runs (after warm-up), as measured on rank 0.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import tempfile
import time

import numpy as np


def _worker(rank, size, path, algorithms, reps, big_mib, out):
    os.environ["FUSE_RENDEZVOUS_DIR"] = path
    from fuse.backends.gloo import GlooBackend
    from fuse.config import Config

    backend = GlooBackend(Config.from_env({}, rank=rank, size=size, gloo_timeout_seconds=60))
    world = backend.world
    small = np.ones(1, dtype=np.float32)
    big = np.ones(big_mib * (1 << 18), dtype=np.float32)
    results = {}
    for algorithm in algorithms:
        world._set_algorithm(algorithm)
        for _ in range(200):
            world.allreduce(small, "float32", "sum")
        lat = []
        for _ in range(reps):
            world.barrier()
            t0 = time.perf_counter()
            for _ in range(1000):
                world.allreduce(small, "float32", "sum")
            lat.append((time.perf_counter() - t0) / 1000)
        world.allreduce(big, "float32", "sum")
        times = []
        for _ in range(reps):
            world.barrier()
            t0 = time.perf_counter()
            world.allreduce(big, "float32", "sum")
            times.append(time.perf_counter() - t0)
        results[algorithm] = (statistics.median(lat), statistics.median(times),
                              min(times), max(times))
    world.barrier()
    if rank == 0:
        out.put(results)
    backend.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-np", type=int, default=2)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--algorithms", default="ring,bcube")
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    algorithms = args.algorithms.split(",")
    with tempfile.TemporaryDirectory() as path:
        procs = [ctx.Process(target=_worker, args=(r, args.np, path, algorithms, args.reps,
                                                   args.mib, out)) for r in range(args.np)]
        for p in procs:
            p.start()
        results = out.get(timeout=600)
        for p in procs:
            p.join()
    nbytes = args.mib << 20
    print(f"gloo binding, {args.np} processes, median of {args.reps} runs")
    for algorithm, (lat, med, lo, hi) in results.items():
        print(f"  {algorithm:6s} 4-byte allreduce {lat * 1e6:8.1f} us   "
              f"{args.mib} MiB float32 allreduce {med * 1e3:7.1f} ms "
              f"({nbytes / med / 1e9:.2f} GB/s; min {lo * 1e3:.1f} ms, max {hi * 1e3:.1f} ms)")


if __name__ == "__main__":
    main()
