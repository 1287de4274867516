"""fuse against DDP, each started by its own launcher the usual way, quiet and beside busy
processes.

    python bench/suite/loaded.py [--load 1] [--rounds 5] [--steps 10] [--models step,cnn] [--json f]

A worker's compute threads decide how a job fares next to anything else that runs: N workers
each with one OpenMP thread per core make every parallel region wait for a descheduled thread
as soon as another process wants a core. So this benchmark starts both sides as their users
would, ``fuserun -np 2`` (which gives each worker its share of the cores) and
``torchrun --nproc_per_node 2`` (which sets OMP_NUM_THREADS=1), from an environment without
any thread variable, and records what each worker ran with.

For each load level (0 and ``--load``: that many ``while True: pass`` processes beside the
job, started before the level's rounds and stopped after them) and each model
(bench/suite/launched_worker.py: ``step`` = ResNet-50-shaped gradient set, ``cnn`` = small CNN),
rounds alternate which side's job runs first; a job times ``--steps`` steps after a warm-up
and reports its median. The result is the median over rounds and the ratio fuse/DDP.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402
import machine  # noqa: E402

WORKER = os.path.join(HERE, "launched_worker.py")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TF_NUM_INTRAOP_THREADS")
BUSY_SECONDS = 3600     # a busy process ends by itself even if this script is killed
JOB_TIMEOUT = 300


def launcher_env() -> dict[str, str]:
    """Our environment without thread settings: each launcher applies its own defaults."""
    return {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}


def fuserun() -> str:
    """The fuserun beside this interpreter, else the one on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "fuserun")
    return beside if os.path.exists(beside) else (shutil.which("fuserun") or "fuserun")


def side_argv(side: str, model: str, steps: int, json_path: str) -> list[str]:
    worker = [WORKER, "--side", side, "--model", model, "--steps", str(steps),
              "--json", json_path]
    if side == "fuse":
        return [fuserun(), "-np", "2", sys.executable, *worker]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
            "--master_addr", "127.0.0.1", "--master_port", str(common.free_port()), *worker]


def run_side(side: str, model: str, steps: int, tmp: str) -> dict:
    """Launch one side's job and return rank 0's record (step times, thread settings)."""
    path = os.path.join(tmp, f"{side}-{model}.json")
    if os.path.exists(path):
        os.unlink(path)
    proc = subprocess.Popen(side_argv(side, model, steps, path), env=launcher_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=JOB_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise RuntimeError(f"the {side} job ({model}) exceeded {JOB_TIMEOUT} s")
    if proc.returncode != 0 or not os.path.exists(path):
        tail = "\n".join(out.decode(errors="replace").splitlines()[-20:])
        raise RuntimeError(f"the {side} job ({model}) failed (exit {proc.returncode}):\n{tail}")
    with open(path) as f:
        return json.load(f)


def start_busy(n: int) -> list[subprocess.Popen]:
    code = f"import time\nend = time.time() + {BUSY_SECONDS}\nwhile time.time() < end: pass\n"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]


def stop_busy(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--load", type=int, default=1, help="busy processes beside the job")
    ap.add_argument("--no-quiet", action="store_true", help="skip the level without load")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--models", default="step,cnn")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    loads = ([] if args.no_quiet else [0]) + ([args.load] if args.load > 0 else [])
    labels = {"fuse": "fuse", "ddp": "DDP"}
    rows = []
    with tempfile.TemporaryDirectory(prefix="fuse-loaded.") as tmp:
        for load in loads:
            busy = start_busy(load)
            try:
                for model in models:
                    samples = {"fuse": [], "DDP": []}
                    threads = {}
                    order = ["fuse", "ddp"]
                    for rnd in range(args.rounds):
                        for side in (order if rnd % 2 == 0 else order[::-1]):
                            rec = run_side(side, model, args.steps, tmp)
                            samples[labels[side]].append(common.median(rec["step_seconds"]))
                            threads[labels[side]] = rec["threads"]
                    name = "ResNet-50 gradient set" if model == "step" else "small CNN"
                    row = common.comparison(f"{name}, load {load}", samples, unit="s",
                                            model=model, load=load, threads=threads)
                    rows.append(row)
                    med = row["median"]
                    print(f"load {load}, {model}: fuse {med['fuse'] * 1e3:.1f} ms, "
                          f"DDP {med['DDP'] * 1e3:.1f} ms, fuse/DDP {row['ratio']:.2f}; "
                          f"threads {threads}", flush=True)
            finally:
                stop_busy(busy)
    common.write_json(args.json, common.job_record(
        "loaded", rows, machine.describe(), vars(args) | {"workers": 2,
                                                          "launchers": {"fuse": "fuserun -np 2",
                                                                        "DDP": "torchrun "
                                                                        "--nproc_per_node 2"}}))


if __name__ == "__main__":
    main()
