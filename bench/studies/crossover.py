"""Where each allreduce path wins, by size: the measurement the size thresholds come from.

    fuserun -np 2 python bench/studies/crossover.py [--sizes 16K,32K,...] [--rounds 5] [--json f]

fuse picks an allreduce's path by its size (fuse/engine/submitter.pyx, executor.pyx): small
ones travel inline with the negotiation and the coordinator reduces them
(FUSE_INLINE_THRESHOLD, bytes times the set's size), on one host large ones go through shared
memory (FUSE_SHM_THRESHOLD), and the rest through the backend's ring.  This script forces each
path in turn (one ``fuse.init`` per path and round, the other thresholds set so that only that
path is taken) and times every size on it, with torch.distributed's gloo beside them as the
reference, rounds alternating the order of the paths.  Reported: the median time per call of
each path at each size, and for each pair of neighbouring paths the smallest size from which
the larger path stays faster: the crossover a default threshold should sit at.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys

import numpy as np

SUITE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "suite")
sys.path.insert(0, SUITE)  # the suite's shared modules (common, machine, models, ...)
import common  # noqa: E402
import machine  # noqa: E402
from allreduce import calls_for, parse_sizes  # noqa: E402

# the configuration that sends every allreduce of the sweep down one path; and, to compare the
# choice by size of two settings in one run, the defaults and the earlier defaults (shared
# memory from 256 KiB; below that the ring, except what travels inline)
PATHS = {
    "inline": {"inline_threshold": 1 << 40, "shm_threshold": 0},
    "shm": {"inline_threshold": 0, "shm_threshold": 1},
    "ring": {"inline_threshold": 0, "shm_threshold": 0},
    "defaults": {},
    "shm from 256 KiB": {"shm_threshold": 256 * 1024},
}


CPU: dict[str, dict[int, list[float]]] = {}     # path -> size -> CPU seconds per call, per round


def cpu_seconds() -> float:
    """This process's CPU time, every thread (the engine's too): a count the machine's load
    does not inflate the way it does wall time."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def time_path(fuse, path: str, sizes: list[int], max_calls: int) -> dict[int, float]:
    """Start fuse configured for ``path``, time each size (after a warm-up), stop fuse."""
    fuse.init(**PATHS[path])
    out = {}
    for nbytes in sizes:
        a = np.zeros(nbytes // 4, np.float32)
        calls = calls_for(nbytes, max_calls)
        fn = lambda: fuse.allreduce_(a, op=fuse.Sum, name=f"crossover.{nbytes}")  # noqa: E731
        common.time_per_call(fn, min(calls, 5))
        fuse.barrier()
        c0 = cpu_seconds()
        out[nbytes] = common.time_per_call(fn, calls)
        CPU.setdefault(path, {}).setdefault(nbytes, []).append((cpu_seconds() - c0) / calls)
    fuse.barrier()
    fuse.shutdown()
    return out


def time_torch(dist, sizes: list[int], max_calls: int, barrier) -> dict[int, float]:
    import torch
    out = {}
    for nbytes in sizes:
        t = torch.zeros(nbytes // 4)
        calls = calls_for(nbytes, max_calls)
        common.time_per_call(lambda: dist.all_reduce(t), min(calls, 5))
        barrier()
        out[nbytes] = common.time_per_call(lambda: dist.all_reduce(t), calls)
    return out


def crossover(sizes: list[int], small: dict[int, float], large: dict[int, float]) -> int | None:
    """The smallest size from which ``large`` is faster than ``small`` at every larger size."""
    found = None
    for nbytes in reversed(sizes):
        if large[nbytes] < small[nbytes]:
            found = nbytes
        else:
            break
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=parse_sizes,
                    default=parse_sizes("4K,8K,16K,24K,32K,48K,64K,96K,128K,192K,256K,512K,1M"))
    ap.add_argument("--paths", default="inline,shm,ring",
                    help=f"comma-separated, of: {', '.join(PATHS)}")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-calls", type=int, default=200)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    paths = args.paths.split(",")

    import torch
    import torch.distributed as dist
    import fuse
    torch.set_num_threads(1)
    fuse.init()
    port = fuse.broadcast_object(common.free_port() if fuse.rank() == 0 else None, 0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=fuse.rank(), world_size=fuse.size())
    fuse.shutdown()

    sides = {p: (lambda p=p: time_path(fuse, p, args.sizes, args.max_calls)) for p in paths}
    sides["torch.distributed"] = lambda: time_torch(dist, args.sizes, args.max_calls,
                                                    dist.barrier)
    samples = common.alternating_rounds(sides, args.rounds, dist.barrier)
    med = {label: {n: common.median([s[n] for s in runs]) for n in args.sizes}
           for label, runs in samples.items()}
    if dist.get_rank() == 0:
        labels = list(med)
        print(f"{'size':>9} " + " ".join(f"{lb:>17}" for lb in labels)
              + "   (us per call; in brackets: over torch.distributed's time)")
        for n in args.sizes:
            torch_t = med["torch.distributed"][n]
            print(f"{common.format_bytes(n):>9} "
                  + " ".join(f"{med[lb][n] * 1e6:9.1f} ({med[lb][n] / torch_t:5.2f})"
                             for lb in labels))
        cross = {}
        print("CPU time of rank 0's process per call (us; median over rounds):")
        for n in args.sizes:
            print(f"{common.format_bytes(n):>9} " + " ".join(
                f"{p}: {common.median(CPU[p][n]) * 1e6:8.1f}" for p in paths))
        forced = [p for p in paths if p in ("inline", "shm", "ring")]
        for small, large in zip(forced, forced[1:]):
            c = crossover(args.sizes, med[small], med[large])
            cross[f"{small}->{large}"] = c
            print(f"{large} faster than {small} from "
                  f"{common.format_bytes(c) if c else 'no size measured'} on")
        rows = [{"size_bytes": n, "median_s": {lb: med[lb][n] for lb in labels},
                 "samples_s": {lb: [s[n] for s in samples[lb]] for lb in labels},
                 "cpu_per_call_s": {p: CPU[p][n] for p in paths}}
                for n in args.sizes]
        record = common.job_record("crossover", rows, machine.describe(),
                                   vars(args) | {"workers": dist.get_world_size()},
                                   crossovers=cross)
        common.write_json(args.json, record)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
