"""How long an elastic job of 4 workers takes to get going again after one is SIGKILLed: from
the kill to the moment the survivors have all finished their next committed step.

    python bench/studies/elastic_recovery.py [--runs 10] [--json bench/results/studies/elastic_recovery.json]

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

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))

# The worker script fuserun starts: the training below, imported from this file.
WORKER = f"""
import os, sys
sys.path.insert(0, {BENCH_DIR!r})
from elastic_recovery import train_until_killed
train_until_killed(sys.argv[1], os.environ["FUSE_HOSTNAME"])
"""


def train_until_killed(out: str, me: str) -> int:
    """The elastic training every recovery bench times (fuserun's here, Ray's and Spark's in
    bench/studies/integrations_recovery.py): 60 committed steps of a small model; the worker of rank 1
    notes the time in ``out``/killed and SIGKILLs itself in the middle of step 30 of the first
    generation; every worker appends each commit's time and generation to ``out``/commits.<me>."""
    import signal

    import torch

    import fuse.torch as hvd
    from fuse.worker.state import rendezvous_generation

    hvd.init()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, opt, step=0)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))

    @hvd.elastic.run
    def train(state):
        while state.step < 60:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            if state.step == 30 and hvd.rank() == 1 and rendezvous_generation() == 0:
                with open(os.path.join(out, "killed"), "w") as f:
                    f.write(repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)
            opt.step()
            state.step += 1
            time.sleep(0.02)
            state.commit()
            with open(os.path.join(out, f"commits.{me}"), "a") as f:
                f.write(f"{time.time()!r} {rendezvous_generation()}\n")

    train(state)
    return hvd.rank()


def recovery_after_kill(out: str, survivors: int) -> float:
    """From the kill to the moment every survivor has made its first commit in the re-formed
    job (a survivor may still commit the step the victim had sent its gradients for; the
    recovery ends with the first commit of a later generation)."""
    with open(os.path.join(out, "killed")) as f:
        killed = float(f.read())
    firsts = []
    for name in os.listdir(out):
        if not name.startswith("commits."):
            continue
        with open(os.path.join(out, name)) as f:
            after = [float(t) for t, g in (line.split() for line in f) if int(g) > 0]
        if after:
            firsts.append(min(after))
    if len(firsts) != survivors:
        raise RuntimeError(f"expected {survivors} survivors committing after the kill, got "
                           f"{len(firsts)}")
    return max(firsts) - killed


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
    return recovery_after_kill(tmp, workers - 1)


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
