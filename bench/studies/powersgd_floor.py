"""The floor of a PowerSGD step on the ResNet-50-shaped gradient set, measured per rank.

    python bench/studies/powersgd_floor.py [--procs 2] [--steps 8] [--json f]

What a rank's step must do whatever the scheme, timed piece by piece in ``--procs`` processes
at once (the ranks of bench/suite/multihost.py's 2x1 or 4x1 layouts share this machine's cores and
memory bandwidth the same way), one thread each, no communication:

* ``forward+backward``: the model's pass with no hooks (reads every parameter, writes every
  gradient: the framework's, DDP pays it too);
* ``optimizer``: torch's SGD with momentum (5 passes over the parameters' memory);
* ``powersgd passes``: fuse's three passes over each compressed gradient
  (fuse.engine.lowrank: feed the error back and compute P; Q = M^T P; P Q^T into the
  gradient), on the real gradients, with the small steps between them (orthogonalising);
* ``memory pass``: one read-and-write of 102 MB (``numpy.copyto``), the unit the others are
  counted in.

The link's share (the fused P and Q messages, 1.3 MB a step) is computed from the rate, not
measured here.  Reported: medians per piece over steps, per process, and their sum.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
SUITE = os.path.join(BENCH, "suite")
sys.path.insert(0, SUITE)


def one_rank(steps: int, start, out) -> None:
    import numpy as np
    import torch
    torch.set_num_threads(1)
    import common
    from fuse.collectives.powersgd import PowerSGD, matrix_shape, orthogonalize
    from fuse.engine import lowrank
    from models import ShapedModel
    torch.manual_seed(0)
    model = ShapedModel()
    x = torch.randn(32, 8)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    psgd = PowerSGD(rank=4, start_iter=0)
    work = []
    for p in model.parameters():
        r = psgd.rank_for(tuple(p.shape), "float32")
        if r:
            n, m = matrix_shape(tuple(p.shape))
            work.append((p, n, m, r, np.zeros((n, m), np.float32),
                         np.ones((n, r), np.float32) * 1e-3, np.ones((r, m), np.float32) * 1e-3))
    big = sum(int(p.numel()) for p in model.parameters())
    src, dst = np.ones(big, np.float32), np.empty(big, np.float32)
    times: dict[str, list[float]] = {k: [] for k in ("forward+backward", "optimizer",
                                                     "powersgd passes", "memory pass")}
    start.wait()
    for step in range(steps + 2):
        t0 = time.perf_counter()
        opt.zero_grad()
        model(x).backward()
        t1 = time.perf_counter()
        for p, n, m, r, target, pa, qa in work:
            g = p.grad.numpy().reshape(n, m)
            pp, qt = np.empty((n, r), np.float32), np.ones((r, m), np.float32)
            lowrank.feed_back_project(target, g, pa, qa, qt, pp)
            orthogonalize(pp)
            lowrank.back_project(target, pp, qt)
            lowrank.expand(pp, qt, g)
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        np.copyto(dst, src)
        t4 = time.perf_counter()
        if step >= 2:
            for k, dt in zip(times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                times[k].append(dt)
    out.put({k: common.median(v) for k, v in times.items()})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import common
    import machine
    ctx = mp.get_context("spawn")
    start, out = ctx.Barrier(args.procs), ctx.Queue()
    procs = [ctx.Process(target=one_rank, args=(args.steps, start, out))
             for _ in range(args.procs)]
    load0 = os.getloadavg()[0]
    for p in procs:
        p.start()
    got = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    load1 = os.getloadavg()[0]
    pieces = {k: common.median([g[k] for g in got]) for k in got[0]}
    floor = pieces["forward+backward"] + pieces["optimizer"] + pieces["powersgd passes"]
    print(f"{args.procs} processes, load {load0:.1f} -> {load1:.1f}: "
          + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in pieces.items())
          + f"; floor without the link {floor * 1e3:.0f} ms", flush=True)
    row = {"case": f"PowerSGD step floor, {args.procs} processes", "pieces_s": pieces,
           "floor_s": floor, "per_process": got, "load": [load0, load1]}
    common.write_json(args.json, common.job_record("powersgd_floor", [row], machine.describe(),
                                                   vars(args)))


if __name__ == "__main__":
    main()
