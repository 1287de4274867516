"""A burst of small asynchronous allreduces: ``--tensors`` (16) of ``--bytes`` (1 KiB) started
back to back, then synchronized, per iteration; what a training step's small gradients cost.

    fuserun -np 2 python bench/studies/burst.py [--api torch|numpy] [--json out.json]
    python bench/studies/burst.py --trees A,B [--runs 3] [-np 2]   # two checkouts, alternating
    python bench/studies/burst.py --trees A,A:FUSE_STRAGGLER_POLICY=off   # one, two settings

A worker times ``--iterations`` iterations after ``--warmup`` untimed ones and reports the
median iteration over all ranks' medians (the slowest rank's median: the job waits for it), and
the mean.  With ``--trees`` the script is a driver: it launches itself under each checkout's
own ``.venv`` (``A/.venv/bin/fuserun``), the checkouts alternating run by run, so that two builds
of fuse (before and after a change) are compared on the same machine in the same minutes; a
checkout may carry settings (``A:NAME=value:NAME=value``) for its runs' environment.  Only
the public API is used, so any version of fuse runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def worker(args) -> dict:
    import numpy as np

    import fuse
    fuse.init()
    if args.api == "torch":
        import torch

        import fuse.torch as hvd
        torch.set_num_threads(1)
        tensors = [torch.zeros(args.bytes // 4) for _ in range(args.tensors)]
        start_one, sync = hvd.allreduce_async_, hvd.synchronize
    else:
        tensors = [np.zeros(args.bytes // 4, np.float32) for _ in range(args.tensors)]
        start_one, sync = fuse.allreduce_async_, fuse.synchronize
    names = [f"burst.{i}" for i in range(args.tensors)]

    def iteration():
        handles = [start_one(t, name=n, op=fuse.Sum) for t, n in zip(tensors, names)]
        for h in handles:
            sync(h)

    for _ in range(args.warmup):
        iteration()
    fuse.barrier()
    times = []
    for _ in range(args.iterations):
        t0 = time.perf_counter()
        iteration()
        times.append(time.perf_counter() - t0)
    mine = np.array([statistics.median(times), sum(times) / len(times)])
    every = fuse.allgather(mine.reshape(1, 2), name="burst.result")
    rank = fuse.rank()
    fuse.shutdown()
    return {"rank": rank, "median_s": float(every[:, 0].max()), "mean_s": float(every[:, 1].max()),
            "rank_medians_s": [float(x) for x in every[:, 0]]}


def drive(args) -> int:
    """Launch the worker under each tree in turn, ``--runs`` times, alternating."""
    trees = args.trees.split(",")
    here = os.path.abspath(__file__)
    passthrough = ["--api", args.api, "--tensors", str(args.tensors), "--bytes",
                   str(args.bytes), "--iterations", str(args.iterations), "--warmup",
                   str(args.warmup)]
    results = {t: [] for t in trees}
    with tempfile.TemporaryDirectory(prefix="fuse-burst-") as tmp:
        for run in range(args.runs):
            for i, tree in enumerate(trees if run % 2 == 0 else trees[::-1]):
                path, *settings = tree.split(":")
                path = os.path.abspath(path)
                env = dict(os.environ, **dict(s.split("=", 1) for s in settings))
                out = os.path.join(tmp, f"{run}-{i}.json")
                venv = os.path.join(path, ".venv", "bin")
                subprocess.run([os.path.join(venv, "fuserun"), "-np", str(args.np),
                                os.path.join(venv, "python"), here, *passthrough,
                                "--json", out], check=True, cwd=path, env=env)
                with open(out) as f:
                    rec = json.load(f)
                results[tree].append(rec)
                print(f"{tree}: median {rec['median_s'] * 1e3:.3f} ms, "
                      f"mean {rec['mean_s'] * 1e3:.3f} ms", flush=True)
    for tree, recs in results.items():
        meds = sorted(r["median_s"] * 1e3 for r in recs)
        print(f"{tree}: {args.tensors} x {args.bytes} B async, {args.np} ranks, "
              f"medians {', '.join(f'{m:.3f}' for m in meds)} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": vars(args), "load_avg": os.getloadavg(),
                       "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "runs": results}, f, indent=1)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--api", choices=("torch", "numpy"), default="torch")
    ap.add_argument("--tensors", type=int, default=16)
    ap.add_argument("--bytes", type=int, default=1024)
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--trees", default=None, help="comma-separated checkouts to compare")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("-np", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.trees:
        return drive(args)
    rec = worker(args)
    if args.json and rec.pop("rank") == 0:
        with open(args.json, "w") as f:
            json.dump(rec, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
