"""Whether an install of fuse's binary wheel is as fast as the source build: 4 B allreduce latency
and 64 MiB bandwidth of two installs, side by side, alternating.

    python bench/studies/wheel_speed.py --install wheel=/tmp/venv-wheel --install source=.venv \\
        [--pairs 6] [--rounds 9] [--json out.json]

Each ``--install LABEL=VENV`` names a virtual environment with fuse installed (a wheel from
scripts/build_wheels.sh, or the editable source build of scripts/setup.sh).  A pair runs one
2-rank job per install and path (``fuserun -np 2`` of that venv), the installs' order
reversed from pair to pair, so a change of the machine's load reaches both alike.  Two
paths: fuse's default (same-host shared memory, reduced by fuse's own kernels) and Gloo's ring
(``FUSE_SHM_THRESHOLD=0``: the reduction and the transport are the Gloo the install carries).
Each job measures both sizes with the suite's sweep (bench/suite/allreduce.py: warm-up,
alternating sizes, median call per round, median over rounds).  Reported per install: the
median and the best over its jobs, and the median over pairs of its job's time over the first
install's job in the same pair (the ratio that the machine's load moves least).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

SUITE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "suite")
sys.path.insert(0, SUITE)  # the suite's shared modules (common, machine, ...)
import common  # noqa: E402
import machine  # noqa: E402

SIZES = [4, 64 * common.MIB]
PATHS = {"shared memory": {}, "gloo ring": {"FUSE_SHM_THRESHOLD": "0"}}


def worker(rounds: int, out: str) -> None:
    """One rank of a job: the sweep over SIZES; rank 0 writes the medians and the build."""
    import numpy as np

    import allreduce
    import fuse
    from fuse import info

    fuse.init()
    try:
        def make(n):
            a = np.zeros(n, np.float32)
            return {"fuse": lambda: fuse.allreduce_(a, op=fuse.Sum, name=f"sweep.{n}")}
        rows = allreduce.sweep(SIZES, rounds, make, fuse.barrier)
        if fuse.rank() == 0:
            build = info.build()
            with open(out, "w") as f:
                json.dump({"seconds": {str(r["size_bytes"]): r["median"]["fuse"] for r in rows},
                           "build": {"gloo": build["gloo"], "options": build["options"],
                                     "bundled": build["bundled_libraries"]}}, f)
    finally:
        fuse.shutdown()


def run_job(venv: str, path_env: dict, rounds: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="fuse-wheel-speed-") as tmp:
        out = os.path.join(tmp, "job.json")
        # the venv's tools first on PATH: an editable install runs meson and ninja on import
        env = {**os.environ, **path_env,
               "PATH": os.path.join(venv, "bin") + os.pathsep + os.environ.get("PATH", "")}
        env.pop("PYTHONPATH", None)
        subprocess.run([os.path.join(venv, "bin", "fuserun"), "-np", "2",
                        os.path.join(venv, "bin", "python"), os.path.abspath(__file__),
                        "--worker", "--rounds", str(rounds), "--out", out],
                       env=env, check=True, timeout=600, cwd=tmp)
        with open(out) as f:
            return json.load(f)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--install", action="append", default=[], metavar="LABEL=VENV")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--json", default=None)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.rounds, args.out)
        return 0
    installs = {label: os.path.abspath(venv)
                for label, venv in (item.split("=", 1) for item in args.install)}
    if len(installs) < 2:
        ap.error("two or more --install LABEL=VENV to compare")
    start = machine.describe()
    samples = {p: {label: {str(n): [] for n in SIZES} for label in installs} for p in PATHS}
    builds = {}
    for pair in range(args.pairs):
        for path, path_env in PATHS.items():
            order = list(installs) if pair % 2 == 0 else list(installs)[::-1]
            for label in order:
                job = run_job(installs[label], path_env, args.rounds)
                builds[label] = job["build"]
                for n, t in job["seconds"].items():
                    samples[path][label][n].append(t)
    first = next(iter(installs))
    rows = []
    for path in PATHS:
        for n in SIZES:
            per = {label: samples[path][label][str(n)] for label in installs}
            med = {label: statistics.median(v) for label, v in per.items()}
            # Each pair's jobs ran back to back, under the same load: the ratio within a pair,
            # then the median over pairs, is what other processes' bursts move least (a burst
            # hits whole jobs: the medians over jobs moved by up to 36 % while the pairs that
            # ran quietly agreed within 3 %).  "best": the fastest job, the code's own speed.
            pair = {label: statistics.median(a / b for a, b in zip(v, per[first]))
                    for label, v in per.items()}
            best = {label: min(v) for label, v in per.items()}
            rows.append({"path": path, "size_bytes": n, "samples_s": per, "median_s": med,
                         "best_s": best, "pair_ratio_median_to_" + first: pair})
            print(f"{path:14s} {common.format_bytes(n):>7s}  " + "  ".join(
                f"{label} {med[label] * 1e6:.1f} us (best {best[label] * 1e6:.1f} us, "
                f"{n / best[label] / 1e9:.3f} GB/s; pair ratio x{pair[label]:.3f})"
                for label in installs))
    for label, build in builds.items():
        print(f"{label}: Gloo {build['gloo']}, {build['options']}")
    common.write_json(args.json, common.job_record(
        "wheel_speed", rows, start, vars(args) | {"installs": installs},
        builds=builds, load_average_end=machine.load_average()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
