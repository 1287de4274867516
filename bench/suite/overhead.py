"""What an initialised but idle fuse costs: the backward pass with and without fuse, and the CPU
an idle engine uses.

    fuserun -np 2 python bench/suite/overhead.py [--rounds 7 --idle-seconds 5 --json f]

Backward: two models (``models.ShapedModel``, ResNet-50's 161 tensors with little compute, and
``models.SmallCNN`` on a batch of 32x32 images), no optimizer hooks.  Rounds alternate
"without fuse" (``fuse.shutdown()``: no engine thread) and "with fuse initialised" (``fuse.init()``,
nothing pending); a measurement is the median backward time of ``--reps`` passes after 3
untimed ones.

Idle CPU: with fuse initialised and nothing pending, the CPU time of the engine's background
thread (from /proc/self/task/<tid>/stat, 10 ms ticks) and of the whole process over
``--idle-seconds`` of sleep, as a fraction of one core, on every rank.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import machine  # noqa: E402
from models import ShapedModel, SmallCNN, synthetic_images  # noqa: E402

import fuse  # noqa: E402
from fuse.worker import lifecycle  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(stat_path: str) -> float:
    """utime + stime of a process or thread, from its /proc stat file."""
    with open(stat_path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def idle_cpu(seconds: float) -> dict:
    """Fractions of one core used by the engine thread and by the whole process while idle."""
    engine_stat = f"/proc/self/task/{lifecycle.engine().thread_native_id}/stat"
    fuse.barrier()
    e0, p0 = cpu_seconds(engine_stat), cpu_seconds("/proc/self/stat")
    time.sleep(seconds)
    e1, p1 = cpu_seconds(engine_stat), cpu_seconds("/proc/self/stat")
    return {"engine_thread": (e1 - e0) / seconds, "process": (p1 - p0) / seconds}


def backward_timer(model, batch, reps, settle=3):
    """Median time of ``reps`` backward passes, after ``settle`` untimed ones (the first passes
    after fuse.init()/shutdown() would otherwise time the toggle's after-effects)."""
    def one():
        model.zero_grad(set_to_none=False)
        t0 = time.perf_counter()
        model(batch).sum().backward()
        return time.perf_counter() - t0

    def measure():
        for _ in range(settle):
            one()
        return common.median([one() for _ in range(reps)])
    return measure


def with_fuse(initialised: bool, measure):
    """A measurement taken with fuse initialised (engine running, idle) or shut down."""
    def run():
        if initialised and not fuse.is_initialized():
            fuse.init()
        elif not initialised and fuse.is_initialized():
            fuse.shutdown()
        return measure()
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=15, help="backward passes per measurement")
    ap.add_argument("--idle-seconds", type=float, default=5.0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)

    models = {"ResNet-50-shaped set (161 tensors)": (ShapedModel(), torch.randn(32, 8)),
              "small CNN, batch 32": (SmallCNN(), synthetic_images(32, seed=0)[0])}
    rows = []
    for name, (model, batch) in models.items():
        measure = backward_timer(model, batch, args.reps)
        for _ in range(3):
            measure()
        # the toggling keeps both ranks in step: init and shutdown are collective
        samples = common.alternating_rounds(
            {"with fuse": with_fuse(True, measure), "without fuse": with_fuse(False, measure)},
            args.rounds, barrier=lambda: None)
        rows.append(common.comparison(f"backward, {name}", samples, unit="s",
                                      fuse="with fuse", competitor="without fuse"))

    if not fuse.is_initialized():
        fuse.init()
    idle = idle_cpu(args.idle_seconds)
    per_rank = fuse.allgather(np.array([[idle["engine_thread"], idle["process"]]]), name="idle")
    rows.append({"case": "idle engine CPU", "unit": "fraction of one core",
                 "seconds": args.idle_seconds,
                 "engine_thread": [float(r[0]) for r in per_rank],
                 "process": [float(r[1]) for r in per_rank]})
    if fuse.rank() == 0:
        for row in rows[:-1]:
            med = row["median"]
            print(f"{row['case']}: without fuse {med['without fuse'] * 1e3:.2f} ms, with fuse "
                  f"initialised {med['with fuse'] * 1e3:.2f} ms, ratio {row['ratio']:.3f}")
        print(f"idle {args.idle_seconds:g} s: engine thread "
              + ", ".join(f"{x * 100:.2f}%" for x in rows[-1]["engine_thread"])
              + " of a core; whole process "
              + ", ".join(f"{x * 100:.2f}%" for x in rows[-1]["process"]))
        common.write_json(args.json, common.job_record(
            "overhead", rows, machine.describe(), vars(args) | {"workers": fuse.size()}))
    fuse.shutdown()


if __name__ == "__main__":
    main()
