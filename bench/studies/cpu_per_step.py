"""What fuse adds to a training step in counts the machine's load does not inflate much.

    fuserun -np 2 python bench/studies/cpu_per_step.py [--model cnn|step] [--rounds 4]
                                               [--unbatched] [--json f]

Three sides in one job, rounds alternating their order (barrier before each): fuse's
DistributedOptimizer, DDP (gloo), and the plain model with no synchronisation at all.  Per step
and side: wall time, the process's CPU time (getrusage: every thread), voluntary and
involuntary context switches, each thread's CPU time (/proc, clock ticks), and the engine's
counters (negotiation cycles, allreduces inline and through shared memory).  On a shared,
loaded machine wall times move with the neighbours' load; CPU time and switches move less,
and (side minus plain) is what the side adds.  Models: ``cnn``, bench/suite/train_cnn.py's small CNN
on 32 images per worker (compute-bound); ``step``, the ResNet-50-shaped parameter set.
``--unbatched`` adds a fourth side, "fuse unbatched": fuse's optimizer with its hooks queueing
each gradient alone (``FUSE_GRAD_BATCH_BYTES=0``, as before batching), for before and after in
one run.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

import torch

SUITE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "suite")
sys.path.insert(0, SUITE)  # the suite's shared modules (common, machine, models, ...)
import common  # noqa: E402
import machine  # noqa: E402
from models import ShapedModel, SmallCNN, synthetic_images  # noqa: E402
from torch_step import init_torch_distributed  # noqa: E402

import fuse.torch as hvd  # noqa: E402
from fuse.worker import lifecycle  # noqa: E402

ENGINE_COUNTERS = ("cycles", "driven", "shm", "shm_direct", "inline", "tensors", "copy_seconds",
                   "backend_seconds")


def thread_cpu() -> dict[str, float]:
    """CPU seconds of each thread of this process, by 'name:tid'."""
    out, tick = {}, os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        out[f"{name}:{tid}"] = (int(fields[11]) + int(fields[12])) / tick
    return out


def measure(step, steps: int) -> dict:
    ru0, e0, th0 = resource.getrusage(resource.RUSAGE_SELF), lifecycle.engine().stats(), \
        thread_cpu()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    wall = (time.perf_counter() - t0) / steps
    ru1, e1, th1 = resource.getrusage(resource.RUSAGE_SELF), lifecycle.engine().stats(), \
        thread_cpu()
    return {"wall_s": wall,
            "cpu_s": (ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime) / steps,
            "voluntary_switches": (ru1.ru_nvcsw - ru0.ru_nvcsw) / steps,
            "involuntary_switches": (ru1.ru_nivcsw - ru0.ru_nivcsw) / steps,
            "threads_cpu_s": {t: (c - th0.get(t, 0.0)) / steps for t, c in th1.items()
                              if c > th0.get(t, 0.0)},
            "engine": {k: (e1[k] - e0[k]) / steps for k in ENGINE_COUNTERS}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("cnn", "step"), default="cnn")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--unbatched", action="store_true",
                    help="also time fuse with each gradient queued alone")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    hvd.init()
    dist = init_torch_distributed()
    rank = hvd.rank()
    if args.model == "cnn":
        x, y = synthetic_images(32, seed=rank)
        loss_fn = torch.nn.CrossEntropyLoss()
        make, loss = SmallCNN, (lambda m: loss_fn(m(x), y))
    else:
        xs = torch.randn(32, 8) + rank
        make, loss = ShapedModel, (lambda m: m(xs))
    torch.manual_seed(0)
    fuse_model, ddp_model, plain_model, before_model = make(), make(), make(), make()
    ddp_model = torch.nn.parallel.DistributedDataParallel(ddp_model)

    def sgd(model):
        return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    fuse_opt = hvd.DistributedOptimizer(sgd(fuse_model),
                                        named_parameters=fuse_model.named_parameters())
    sides = {"fuse": (fuse_model, fuse_opt), "DDP": (ddp_model, sgd(ddp_model)),
             "plain": (plain_model, sgd(plain_model))}
    if args.unbatched:
        opt = hvd.DistributedOptimizer(sgd(before_model),
                                       named_parameters=before_model.named_parameters())
        opt._batch_bytes = 0    # what FUSE_GRAD_BATCH_BYTES=0 sets, for this optimizer only
        sides["fuse unbatched"] = (before_model, opt)

    def stepper(model, opt):
        def step():
            opt.zero_grad()
            loss(model).backward()
            opt.step()
        return step
    steps = {label: stepper(*mo) for label, mo in sides.items()}
    for step in steps.values():
        for _ in range(3):
            step()
    records = {label: [] for label in steps}

    def one(label):
        records[label].append(measure(steps[label], args.steps))
        return records[label][-1]["wall_s"]
    common.alternating_rounds({lb: (lambda lb=lb: one(lb)) for lb in steps}, args.rounds,
                              hvd.barrier)
    if rank == 0:
        print(f"{args.model}: {args.rounds} rounds of {args.steps} steps, "
              f"FUSE_SHM_THRESHOLD={os.environ.get('FUSE_SHM_THRESHOLD', 'default')}, "
              f"load {os.getloadavg()[0]:.1f}; medians per step")
        summary = {}
        for label, recs in records.items():
            med = {k: common.median([r[k] for r in recs]) for k in
                   ("wall_s", "cpu_s", "voluntary_switches", "involuntary_switches")}
            med["engine"] = {k: common.median([r["engine"][k] for r in recs])
                             for k in ENGINE_COUNTERS}
            summary[label] = med
            print(f"  {label:>5}: wall {med['wall_s'] * 1e3:7.2f} ms  CPU "
                  f"{med['cpu_s'] * 1e3:6.2f} ms  switches {med['voluntary_switches']:5.1f} "
                  f"vol {med['involuntary_switches']:5.1f} invol"
                  + (f"  engine {med['engine']}" if label.startswith("fuse") else ""))
        for label in [lb for lb in sides if lb != "plain"]:
            print(f"  {label} adds over plain: CPU "
                  f"{(summary[label]['cpu_s'] - summary['plain']['cpu_s']) * 1e3:+.2f} ms, "
                  f"voluntary switches {summary[label]['voluntary_switches'] - summary['plain']['voluntary_switches']:+.1f}")
        common.write_json(args.json, common.job_record(
            f"cpu_per_step_{args.model}", [{"side": lb, "rounds": recs}
                                           for lb, recs in records.items()],
            machine.describe(), vars(args) | {
                "shm_threshold": os.environ.get("FUSE_SHM_THRESHOLD", "default")},
            summary=summary))
    dist.destroy_process_group()
    hvd.shutdown()


if __name__ == "__main__":
    main()
