"""What fuse's parts of the multihost workload's step cost in CPU time on one host: the
gradient hooks on the backward thread and the engine's reduction through the shared gradient
slots, the scaling model's costs per gradient and per byte.

    fuserun -np 2 python bench/scaling/step_cpu.py --steps 10 --json out.json

The step (bench/suite/launched_worker.py ``--model step``: the ResNet-50-shaped parameter set,
SGD with momentum, fuse.torch's DistributedOptimizer) runs as in the benchmark, on one host.
CPU time, not wall time, so that what other threads take from the same cores meanwhile does not
count (the model shares the cores out itself):

- around the hooks, the CPU time of the thread that runs them (``time.thread_time``): the hook
  after accumulation (the request, and the batch's submission when it fills) and the callback
  at the end of backward (the rest of the batch), per gradient; the hook before accumulation
  (the gradient written into its shared slot), per byte it wrote;
- every other thread of the process (the engine's: with OMP_NUM_THREADS=1 torch starts none)
  from /proc/self/task/*/schedstat, per byte of gradient: the engine reduces the gradients
  straight between the ranks' shared slots, a path of its own (a NumPy allreduce is staged
  through the engine's segments).

Rank 0 writes the medians over the steps after the first two (the first builds the slots).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "suite"))
from models import ShapedModel  # noqa: E402

import fuse.torch as hvd  # noqa: E402
from fuse.frameworks.torch.optimizer import DistributedOptimizer  # noqa: E402

SPENT = {"submit": 0.0, "slot": 0.0, "slot_bytes": 0}


def counted(kind: str, method):
    """``method`` with the CPU time of its thread added to SPENT[kind]."""
    def wrapper(*args, **kwargs):
        t0 = time.thread_time()
        try:
            return method(*args, **kwargs)
        finally:
            SPENT[kind] += time.thread_time() - t0
    return wrapper


def receive_counted(method):
    """The hook before accumulation, its CPU time and the bytes it wrote into slots counted."""
    def wrapper(self, i, grad):
        t0 = time.thread_time()
        out = method(self, i, grad)
        SPENT["slot"] += time.thread_time() - t0
        if out is not None:
            SPENT["slot_bytes"] += grad.numel() * grad.element_size()
        return out
    return wrapper


def other_threads_cpu(main_id: int) -> float:
    """CPU seconds of every thread of this process but ``main_id`` (schedstat: nanoseconds)."""
    total = 0
    for tid in os.listdir("/proc/self/task"):
        if int(tid) == main_id:
            continue
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue        # a thread that ended meanwhile
    return total / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    DistributedOptimizer._hook = counted("submit", DistributedOptimizer._hook)
    DistributedOptimizer._end_of_backward = counted("submit",
                                                    DistributedOptimizer._end_of_backward)
    DistributedOptimizer._receive = receive_counted(DistributedOptimizer._receive)
    hvd.init()
    torch.manual_seed(0)
    model = ShapedModel()
    x = torch.randn(32, 8) + hvd.rank()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9),
                                   named_parameters=model.named_parameters())
    gradients = sum(1 for p in model.parameters() if p.requires_grad)
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    main_id = threading.get_native_id()
    samples = []
    for _ in range(args.steps + 2):
        opt.zero_grad()
        SPENT.update(submit=0.0, slot=0.0, slot_bytes=0)
        hvd.barrier()
        engine0 = other_threads_cpu(main_id)
        model(x).backward()
        opt.step()
        engine = other_threads_cpu(main_id) - engine0
        samples.append((SPENT["submit"] / gradients, SPENT["slot"] / SPENT["slot_bytes"]
                        if SPENT["slot_bytes"] else 0.0, SPENT["slot_bytes"], engine / nbytes))
    samples = samples[2:]
    out = {"ranks": hvd.size(), "gradients": gradients, "gradient_bytes": nbytes,
           "per_gradient_s": statistics.median(s[0] for s in samples),
           "per_byte_s": statistics.median(s[1] for s in samples),
           "slot_bytes": statistics.median(s[2] for s in samples),
           "engine_per_byte_s": statistics.median(s[3] for s in samples),
           "load_average": list(os.getloadavg())}
    if hvd.rank() == 0:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
        print(f"hooks: {out['per_gradient_s'] * 1e6:.1f} us a gradient, "
              f"{1 / out['per_byte_s'] / 1e9 if out['per_byte_s'] else 0:.2f} GB/s into the "
              f"slots; the engine {1 / out['engine_per_byte_s'] / 1e9:.2f} GB/s of gradient")
    hvd.shutdown()


if __name__ == "__main__":
    main()
