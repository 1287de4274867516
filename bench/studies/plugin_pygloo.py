"""Allreduce on the pygloo plugin (plugins/fuse-pygloo) beside fuse's own Gloo binding, one job.

(Not named pygloo.py: the script's folder comes first on sys.path and would hide the package.)

    bash scripts/test_pygloo.sh                   # makes .venv-pygloo (Python 3.10 + plugin)
    PATH=$PWD/.venv-pygloo/bin:$PATH fuserun -np 2 python bench/studies/plugin_pygloo.py [--json out.json]

Both sides are fuse, the same engine making the same calls; only the backend differs: fuse's
Gloo binding (GIL released, a native ops table the engine thread calls without the GIL) and
pygloo (the engine thread calls Python methods, and pygloo holds the GIL for the whole of
every collective).  Each round initialises fuse on one backend, measures, shuts down, then
the other; the order reverses every other round.  FUSE_SHM_THRESHOLD=0 and
FUSE_INLINE_THRESHOLD=0 (set here): otherwise small allreduces travel with the negotiation and
large ones through shared memory, on either backend, and neither would reach the binding.

Two measurements per backend and round:
- time per blocking allreduce (float32 sum, in place) per size, as in bench/suite/allreduce.py;
- what the framework's Python threads keep while allreduces are in flight: a thread counts
  loop iterations while the main thread waits on back-to-back allreduces of ``--probe-size``.
  Reported: its rate over its rate with nothing in flight (measured just after, same round;
  on a 2-core machine this share also counts the cores the binding's I/O takes), and the
  longest time between two of its iterations, busy and idle: the longest the thread was kept
  from running, which is what holding the GIL through a collective shows as.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import numpy as np

SUITE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "suite")
sys.path.insert(0, SUITE)  # the suite's shared modules (common, machine, models, ...)
import common  # noqa: E402
import machine  # noqa: E402
from allreduce import calls_for, parse_sizes  # noqa: E402

BACKENDS = ("gloo", "pygloo")
SIZES = "4,1K,64K,1M,16M,64M"


class Counter:
    """A Python thread counting loop iterations between start() and stop(), and the longest
    time between two of them (how long the thread was kept from running)."""

    def __init__(self):
        self.count, self.longest = 0, 0.0
        self._run = False
        self._thread = None

    def start(self) -> None:
        self.count, self.longest, self._run = 0, 0.0, True
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        n, longest, clock = 0, 0.0, time.perf_counter
        last = clock()
        while self._run:
            n += 1
            now = clock()
            if now - last > longest:
                longest = now - last
            last = now
        self.count, self.longest = n, longest

    def stop(self) -> tuple[int, float]:
        self._run = False
        self._thread.join()
        return self.count, self.longest


def python_progress(fuse, nbytes: int, calls: int) -> tuple[float, float, float]:
    """While ``calls`` allreduces of ``nbytes`` run: the counter's rate over its rate with
    nothing in flight, its longest stall then, and its longest stall with nothing in flight."""
    a = np.zeros(max(1, nbytes // 4), np.float32)
    fuse.allreduce_(a, op=fuse.Sum, name="probe")          # warm: connections, cache
    counter = Counter()
    fuse.barrier()
    start = time.perf_counter()
    counter.start()
    for _ in range(calls):
        fuse.allreduce_(a, op=fuse.Sum, name="probe")
    counted, busy_stall = counter.stop()
    window = time.perf_counter() - start
    fuse.barrier()
    start = time.perf_counter()
    counter.start()
    time.sleep(min(window, 2.0))                            # the same thread with nothing to do
    idle_count, idle_stall = counter.stop()
    idle = idle_count / (time.perf_counter() - start)
    return (counted / window / idle if idle else 0.0), busy_stall, idle_stall


def one_backend(fuse, backend: str, sizes: list[int], max_calls: int, probe_size: int,
                probe_calls: int) -> dict:
    """Initialise fuse on ``backend``, measure, shut down; {"times": {size: s}, "progress": x,
    "rank": r, "size": n}."""
    fuse.init(backend=backend, shm_threshold=0, inline_threshold=0)
    rank, size = fuse.rank(), fuse.size()
    times = {}
    for nbytes in sizes:
        a = np.zeros(max(1, nbytes // 4), np.float32)
        calls = calls_for(nbytes, max_calls)
        fn = (lambda a=a, n=nbytes: fuse.allreduce_(a, op=fuse.Sum, name=f"sweep.{n}"))
        common.time_per_call(fn, min(calls, 3))              # warm-up
        fuse.barrier()
        times[nbytes] = common.time_per_call(fn, calls)
    progress, stall, idle_stall = python_progress(fuse, probe_size, probe_calls)
    fuse.shutdown()
    return {"times": times, "progress": progress, "stall": stall, "idle_stall": idle_stall,
            "rank": rank, "size": size}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=parse_sizes, default=parse_sizes(SIZES),
                    help=f"comma-separated byte sizes (default {SIZES})")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-calls", type=int, default=100)
    ap.add_argument("--probe-size", type=parse_sizes, default=parse_sizes("64M"),
                    help="allreduce size while the Python thread counts (default 64M)")
    ap.add_argument("--probe-calls", type=int, default=8)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import fuse
    load_at_start = machine.load_average()
    samples = {b: [] for b in BACKENDS}
    for rnd in range(args.rounds):
        for backend in (BACKENDS if rnd % 2 == 0 else BACKENDS[::-1]):
            samples[backend].append(one_backend(fuse, backend, args.sizes, args.max_calls,
                                                args.probe_size[0], args.probe_calls))
    rank, size = samples["gloo"][0]["rank"], samples["gloo"][0]["size"]
    if rank != 0:
        return 0
    labels = {"gloo": "fuse (gloo)", "pygloo": "fuse (pygloo)"}
    rows = []
    for nbytes in args.sizes:
        per = {labels[b]: [s["times"][nbytes] for s in samples[b]] for b in BACKENDS}
        row = common.comparison(f"allreduce {common.format_bytes(nbytes)}", per, unit="s",
                                fuse=labels["gloo"], competitor=labels["pygloo"],
                                size_bytes=nbytes, calls=calls_for(nbytes, args.max_calls))
        row["bandwidth_GBps"] = {k: nbytes / t / 1e9 for k, t in row["median"].items()}
        rows.append(row)
    progress = {labels[b]: [s["progress"] for s in samples[b]] for b in BACKENDS}
    probe = common.format_bytes(args.probe_size[0])
    rows.append(common.comparison(
        f"Python progress during {probe} allreduces", progress, unit="share of idle rate",
        fuse=labels["gloo"], competitor=labels["pygloo"], lower_is_better=False,
        size_bytes=args.probe_size[0], calls=args.probe_calls))
    for key, what in (("stall", f"longest Python stall during {probe} allreduces"),
                      ("idle_stall", "longest Python stall with nothing in flight")):
        rows.append(common.comparison(
            what, {labels[b]: [s[key] for s in samples[b]] for b in BACKENDS}, unit="s",
            fuse=labels["gloo"], competitor=labels["pygloo"], size_bytes=args.probe_size[0],
            calls=args.probe_calls))
    print(f"float32 allreduce, fuse on gloo vs on pygloo, {size} ranks, {args.rounds} rounds, "
          "medians (FUSE_SHM_THRESHOLD=0, FUSE_INLINE_THRESHOLD=0)")
    for row in rows[:-3]:
        g, p = (row["median"][labels[b]] for b in BACKENDS)
        bw = row["bandwidth_GBps"]
        print(f"  {common.format_bytes(row['size_bytes']):>9}: gloo {g * 1e6:10.1f} us "
              f"{bw[labels['gloo']]:7.3f} GB/s | pygloo {p * 1e6:10.1f} us "
              f"{bw[labels['pygloo']]:7.3f} GB/s | pygloo/gloo time {p / g:.2f}x")
    share, stall, idle = (row["median"] for row in rows[-3:])
    g, p = labels["gloo"], labels["pygloo"]
    print(f"  a Python thread while {probe} allreduces run: gloo {share[g]:.2f}, pygloo "
          f"{share[p]:.2f} of its idle rate; longest stall gloo {stall[g] * 1e3:.1f} ms, "
          f"pygloo {stall[p] * 1e3:.1f} ms (idle: {idle[g] * 1e3:.1f} / {idle[p] * 1e3:.1f} ms)")
    from importlib import metadata
    record = common.job_record("allreduce_pygloo", rows, machine.describe(),
                               vars(args) | {"workers": size,
                                             "env": "FUSE_SHM_THRESHOLD=0 "
                                                    "FUSE_INLINE_THRESHOLD=0"},
                               pygloo=metadata.version("pygloo"), load_at_start=load_at_start)
    common.write_json(args.json, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
