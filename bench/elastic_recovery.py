"""How long an elastic job of 4 workers takes to get going again after one is SIGKILLed: from
the kill to the moment the survivors have all finished their next committed step.

    python bench/elastic_recovery.py [--runs 10] [--json bench/results/elastic_recovery.json]

Each run starts ``fuserun -np 4 --min-np 2`` on four hosts that resolve to this machine
(localhost, 127.0.0.1, 127.0.0.2, 127.0.0.3: distinct hosts to the driver), trains a small
torch model (TorchState with a DistributedOptimizer, a commit every step of ~20 ms), and has
the worker of rank 1 note the time and SIGKILL itself in the middle of step 30.  Every worker
logs the wall-clock time of each commit; the recovery time is the latest, over the three
survivors, of their first commit in the re-formed job (generation 1), minus the kill.  It
includes noticing the death (the control channel closes), rolling back, shutting the engine down, the driver's new generation, the
rendezvous, starting the engine again, broadcasting the state, and redoing the step.
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

WORKER = r'''
import os, signal, sys, time
import torch
import fuse.torch as hvd
from fuse.common import basics
out = sys.argv[1]
hvd.init()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                               named_parameters=model.named_parameters())
state = hvd.elastic.TorchState(model, opt, step=0)
me = f"{os.environ['FUSE_HOSTNAME']}"
x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))

@hvd.elastic.run
def train(state):
    while state.step < 60:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        if state.step == 30 and hvd.rank() == 1 and basics._state.generation == 0:
            with open(os.path.join(out, "killed"), "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        opt.step()
        state.step += 1
        time.sleep(0.02)
        state.commit()
        with open(os.path.join(out, f"commits.{me}"), "a") as f:
            f.write(f"{time.time()!r} {basics._state.generation}\n")

train(state)
'''


def one_run(tmp: str, workers: int = 4) -> float:
    script = os.path.join(tmp, "worker.py")
    with open(script, "w") as f:
        f.write(WORKER)
    hosts = ["localhost"] + [f"127.0.0.{i}" for i in range(1, workers)]
    argv = [sys.executable, "-m", "fuse.runner.launch", "-np", str(workers), "--min-np",
            str(max(1, workers // 2)), "-H", ",".join(f"{h}:1" for h in hosts),
            sys.executable, script, tmp]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FUSE_", "HOROVOD_"))}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"the job failed:\n{proc.stderr[-3000:]}")
    with open(os.path.join(tmp, "killed")) as f:
        killed = float(f.read())
    firsts = []
    for name in os.listdir(tmp):
        if not name.startswith("commits."):
            continue
        with open(os.path.join(tmp, name)) as f:
            # a survivor may still commit the step the victim had sent its gradients for;
            # the recovery ends with the first commit of the re-formed job
            after = [float(t) for t, g in (line.split() for line in f) if int(g) > 0]
        if after:
            firsts.append(min(after))
    if len(firsts) != workers - 1:
        raise RuntimeError(f"expected {workers - 1} survivors committing after the kill, got "
                           f"{len(firsts)}")
    return max(firsts) - killed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--json", default=None)
    p.add_argument("--workers", type=int, default=4,
                   help="workers at the start (min-np is half of them); default 4")
    args = p.parse_args()
    samples, loads = [], []
    for i in range(args.runs):
        loads.append(os.getloadavg()[0])
        with tempfile.TemporaryDirectory() as tmp:
            samples.append(one_run(tmp, args.workers))
        print(f"run {i + 1}: {samples[-1]:.3f} s (load {loads[-1]:.2f})", flush=True)
    q = statistics.quantiles(samples, n=10) if len(samples) >= 2 else samples
    summary = {"workers": args.workers, "runs": len(samples),
               "median_s": statistics.median(samples),
               "min_s": min(samples), "max_s": max(samples), "deciles_s": q,
               "samples_s": samples, "load_1min": loads,
               "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(json.dumps(summary, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
