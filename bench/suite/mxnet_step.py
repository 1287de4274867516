"""An MXNet Gluon training step on 2 workers: fuse.mxnet against Horovod 0.28.1 itself.

    .venv-mxnet/bin/python bench/suite/mxnet_step.py [--load 1] [--rounds 3] [--steps 10]
        [--models dense,resnet50] [--horovod-venv .venv-horovod-mxnet] [--json f]

Run from the MXNet environment (.venv-mxnet, made by scripts/test_mxnet.sh): the suite
(``bash scripts/bench.sh --only mxnet``) starts this script with that environment's Python.
Horovod lives in an environment of its own, built from its sdist with MXNet 1.9.1 and Gloo by
scripts/build_horovod_mxnet.sh; without it the job stops with a note saying so (fuse's side
never needs Horovod).

Each round launches both sides' 2-worker jobs (bench/suite/mxnet_worker.py), the order
alternating from round to round: fuse's ``DistributedTrainer`` under ``fuserun -np 2``,
Horovod's under ``horovodrun -np 2 --gloo``.  Both launches get the same thread settings
(``OMP_NUM_THREADS`` and ``MXNET_CPU_WORKER_NTHREADS`` = ``--threads``, each worker's share of
the cores; ``MXNET_ENGINE_TYPE`` = ``--engine``) and ``MXNET_MKLDNN_ENABLED=0`` (see
:func:`mxnet_env`).  A job times ``--steps`` steps of each model
after a warm-up and reports the median; the figure is the median over rounds and the ratio
fuse/Horovod.  Load levels: 0 and ``--load`` (that many ``while True: pass`` processes beside
the jobs).
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
import loaded  # noqa: E402  (busy processes)
import machine  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(HERE, "mxnet_worker.py")
DEFAULT_HOROVOD_VENV = os.path.join(ROOT, ".venv-horovod-mxnet")
HOROVOD_BUILD = "scripts/build_horovod_mxnet.sh"
JOB_TIMEOUT = 600
MODEL_NAMES = {"dense": "Dense 4x2560 (26.3 M parameters, 10 tensors)",
               "resnet50": "ResNet-50 v1 on 32x32 (25.6 M parameters, 161 tensors)"}


def fuserun() -> str:
    beside = os.path.join(os.path.dirname(sys.executable), "fuserun")
    return beside if os.path.exists(beside) else (shutil.which("fuserun") or "fuserun")


def horovod_python(venv: str) -> str | None:
    """The Horovod environment's interpreter if Horovod's MXNet module imports there."""
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        return None
    ok = subprocess.run([python, "-c", "import horovod.mxnet"], capture_output=True)
    return python if ok.returncode == 0 else None


def mxnet_env(args) -> dict[str, str]:
    """The thread budget and MXNet settings both sides' workers get.  oneDNN (MKLDNN) is off
    on both: Horovod 0.28.1's MXNet ops fail on the oneDNN-layout gradients MXNet 1.9.1's
    convolutions produce ("Check failed: !IsMKLDNNData(): We can't generate TBlob for MKLDNN
    data"), so with it on the ResNet step cannot run on Horovod's side."""
    return {"OMP_NUM_THREADS": str(args.threads), "MXNET_CPU_WORKER_NTHREADS": str(args.threads),
            "MXNET_ENGINE_TYPE": args.engine, "MXNET_MKLDNN_ENABLED": "0"}


def worker_args(args, side: str, json_path: str) -> list[str]:
    return [WORKER, "--side", side, "--models", args.models, "--size", args.size,
            "--warmup", str(args.warmup), "--steps", str(args.steps), "--json", json_path]


def side_argv(side: str, args, json_path: str) -> list[str]:
    if side == "fuse":
        return [fuserun(), "-np", "2", sys.executable, "-u", *worker_args(args, side, json_path)]
    python = args.horovod_python
    horovodrun = os.path.join(os.path.dirname(python), "horovodrun")
    return [python, horovodrun, "-np", "2", "-H", "localhost:2", "--gloo", python, "-u",
            *worker_args(args, side, json_path)]


def run_side(side: str, args, tmp: str) -> dict:
    """Launch one side's 2-worker job; rank 0's record."""
    path = os.path.join(tmp, f"{side}.json")
    if os.path.exists(path):
        os.unlink(path)
    env = dict(os.environ, **mxnet_env(args))
    if side == "horovod":   # its own environment's tools first (horovodrun starts python)
        env["PATH"] = os.path.dirname(args.horovod_python) + os.pathsep + env["PATH"]
    proc = subprocess.Popen(side_argv(side, args, path), env=env, start_new_session=True)
    try:
        proc.wait(timeout=JOB_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise RuntimeError(f"the {side} job exceeded {JOB_TIMEOUT} s")
    if proc.returncode != 0 or not os.path.exists(path):
        raise RuntimeError(f"the {side} job failed (exit {proc.returncode}): see its output "
                           "above")
    with open(path) as f:
        return json.load(f)


def measure(args, models: list[str], loads: list[int], tmp: str) -> tuple[list, dict]:
    """(rows, info): for each load level, rounds of both sides' jobs, alternating."""
    labels = {"fuse": "fuse", "horovod": "Horovod"}
    rows, info = [], {"sides": {}}
    for load in loads:
        busy = loaded.start_busy(load)
        try:
            samples = {m: {"fuse": [], "Horovod": []} for m in models}
            for rnd in range(args.rounds):
                for side in (("fuse", "horovod") if rnd % 2 == 0 else ("horovod", "fuse")):
                    rec = run_side(side, args, tmp)
                    info["sides"][labels[side]] = {k: rec[k] for k in
                                                   ("package", "mxnet", "threads", "workers")}
                    for m in models:
                        entry = rec["models"][m]
                        info[m] = {"parameters": entry["parameters"], "tensors": entry["tensors"]}
                        samples[m][labels[side]].append(common.median(entry["step_seconds"]))
        finally:
            loaded.stop_busy(busy)
        for m in models:
            name = MODEL_NAMES[m] if args.size == "full" else f"{m} (tiny)"
            row = common.comparison(f"{name}, Gluon step, load {load}", samples[m], unit="s",
                                    competitor="Horovod", model=m, load=load, **info[m])
            rows.append(row)
            med = row["median"]
            print(f"load {load}, {m}: fuse {med['fuse'] * 1e3:.1f} ms, Horovod "
                  f"{med['Horovod'] * 1e3:.1f} ms, fuse/Horovod {row['ratio']:.2f}", flush=True)
    return rows, info


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_step_options(ap, "OMP and MXNet CPU worker threads per worker, both sides")
    ap.add_argument("--engine", default="ThreadedEnginePerDevice",
                    help="MXNET_ENGINE_TYPE, both sides")
    ap.add_argument("--horovod-venv", default=DEFAULT_HOROVOD_VENV,
                    help=f"the environment {HOROVOD_BUILD} made")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    # fuserun, and the editable install's rebuild on import, want this environment's tools
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    args.horovod_python = horovod_python(args.horovod_venv)
    if args.horovod_python is None:
        sys.exit(f"mxnet_step.py: no Horovod with MXNet in {args.horovod_venv}; build it with "
                 f"{HOROVOD_BUILD} (Horovod 0.28.1 from its sdist, MXNet 1.9.1, Gloo)")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    loads = ([] if args.no_quiet else [0]) + ([args.load] if args.load > 0 else [])
    with tempfile.TemporaryDirectory(prefix="fuse-mxnet.") as tmp:
        rows, info = measure(args, models, loads, tmp)
    config = {k: v for k, v in vars(args).items() if k not in ("horovod_python",)}
    common.write_json(args.json, common.job_record(
        "mxnet_step", rows, machine.describe(),
        config | {"workers": 2, "mxnet_env": mxnet_env(args), "sides": info["sides"],
                  "launchers": {"fuse": "fuserun -np 2",
                                "Horovod": "horovodrun -np 2 -H localhost:2 --gloo"},
                  "horovod_build": f"{HOROVOD_BUILD}: Horovod 0.28.1 sdist, HOROVOD_WITH_MXNET=1 "
                                   "HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 "
                                   "HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1"}))


if __name__ == "__main__":
    main()
