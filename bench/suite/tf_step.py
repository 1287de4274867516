"""A TensorFlow training step on 2 workers: fuse.tensorflow against MultiWorkerMirroredStrategy.

    .venv-tf/bin/python bench/suite/tf_step.py [--load 1] [--rounds 3] [--steps 10] [--fit]
        [--models dense,resnet50] [--json f]

Run from the TensorFlow environment (.venv-tf, made by scripts/test_tensorflow.sh): the suite
(``bash scripts/bench.sh --only tensorflow``) starts this script with that environment's Python.

Each round launches both sides' 2-worker jobs (bench/suite/tf_worker.py), the order alternating
from round to round: fuse under ``fuserun -np 2``, MultiWorkerMirroredStrategy as two processes
whose TF_CONFIG names two localhost ports (RING collectives). Both sides' workers run with the
same TensorFlow intra-op and inter-op thread counts (each worker's share of the cores). A job
times ``--steps`` steps of each model after a warm-up and reports the median; the figure is
the median over rounds and the ratio fuse/MWMS. Load levels: 0 and ``--load`` (that many
``while True: pass`` processes beside the jobs). ``--hosts``: R workers (``--per-host``, a
list: 1 for the 2x1 layout, 2 for 2x2) on each of two network-namespace hosts joined by links
capped at ``--rate`` (bench/suite/multihost.py's hosts; needs root): fuse as
``fuserun -np 2R -H a:R,b:R`` from the first host, MWMS with every worker's host address and
port in TF_CONFIG.
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

# hosts of their own, apart from the multihost workload's (which may be up meanwhile)
os.environ.setdefault("FUSE_BENCH_CLUSTER_NAME", "fztf")
os.environ.setdefault("FUSE_BENCH_CLUSTER_NET", "10.234.0")
import multihost  # noqa: E402  (network-namespace hosts)

WORKER = os.path.join(HERE, "tf_worker.py")
JOB_TIMEOUT = 600
MODEL_NAMES = {"dense": "Dense 4x2560 (26 M parameters, 10 tensors)",
               "resnet50": "ResNet-50 on 32x32 (25.6 M parameters, 214 tensors)"}


def fuserun() -> str:
    beside = os.path.join(os.path.dirname(sys.executable), "fuserun")
    return beside if os.path.exists(beside) else (shutil.which("fuserun") or "fuserun")


def worker_args(args, json_path: str) -> list[str]:
    out = [WORKER, "--models", args.models, "--size", args.size, "--threads", str(args.threads),
           "--warmup", str(args.warmup), "--steps", str(args.steps), "--json", json_path]
    return out + (["--fit"] if args.fit else [])


def _wait(procs: list[subprocess.Popen], what: str) -> None:
    """Wait for every process of a job; kill the lot if one fails or the job runs too long."""
    try:
        for p in procs:
            p.wait(timeout=JOB_TIMEOUT)
    except subprocess.TimeoutExpired:
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)
        raise RuntimeError(f"the {what} job exceeded {JOB_TIMEOUT} s")
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    failed = [p.returncode for p in procs if p.returncode != 0]
    if failed:
        raise RuntimeError(f"the {what} job failed (exit {failed[0]}): see its output above")


def run_fuse(args, path: str, hosts=None, per_host: int = 1) -> None:
    if hosts is None:
        argv, env = [fuserun(), "-np", "2"], None
    else:   # per_host workers on each of two namespace hosts, started from the first over ssh
        argv = hosts.argv(1, [fuserun(), "-np", str(2 * per_host), "-H",
                              ",".join(f"{a}:{per_host}" for a in hosts.addrs[:2])],
                          {"PATH": os.environ["PATH"],
                           "FUSE_SSH_ARGS": f"-F {hosts.dir}/ssh_config"})
        env = hosts.env
    proc = subprocess.Popen([*argv, sys.executable, "-u", *worker_args(args, path),
                             "--side", "fuse"], env=env, start_new_session=True)
    _wait([proc], "fuse")


def mwms_cluster(hosts, per_host: int) -> tuple[list[str], list[int]]:
    """MWMS's worker addresses (TF_CONFIG's cluster) and the host (1-based) each runs on:
    2 workers on localhost, or ``per_host`` on each of the two namespace hosts, a port each."""
    if hosts is None:
        return [f"localhost:{common.free_port()}" for _ in range(2)], [0, 0]
    ports = [common.free_port() for _ in range(per_host)]
    workers = [(h + 1, f"{addr}:{port}") for h, addr in enumerate(hosts.addrs[:2])
               for port in ports]
    return [a for _, a in workers], [h for h, _ in workers]


def run_mwms(args, path: str, hosts=None, per_host: int = 1) -> None:
    addresses, on_host = mwms_cluster(hosts, per_host)
    cluster = {"worker": addresses}
    procs = []
    for index, host in enumerate(on_host):
        config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        argv = [sys.executable, "-u", *worker_args(args, path), "--side", "mwms"]
        if hosts is None:
            env = dict(os.environ, TF_CONFIG=config)
        else:
            argv, env = hosts.argv(host, argv, {"TF_CONFIG": config}), hosts.env
        procs.append(subprocess.Popen(argv, env=env, start_new_session=True))
    _wait(procs, "MultiWorkerMirroredStrategy")


def run_side(side: str, args, tmp: str, hosts=None, per_host: int = 1) -> dict:
    path = os.path.join(tmp, f"{side}.json")
    if os.path.exists(path):
        os.unlink(path)
    (run_fuse if side == "fuse" else run_mwms)(args, path, hosts, per_host)
    with open(path) as f:
        return json.load(f)


def settings(args, loads: list[int], hosts) -> list[tuple]:
    """(load, workers per host or None on this machine, the case's setting text) to measure."""
    if hosts is None:
        return [(load, None, "") for load in loads]
    return [(load, r, f", 2x{r} hosts at {args.rate}") for r in args.per_host for load in loads]


def measure(args, models: list[str], loads: list[int], tmp: str, hosts) -> tuple:
    """(rows, notes, info): for each setting, rounds of both sides' jobs, alternating."""
    labels = {"fuse": "fuse", "mwms": "MWMS"}
    rows, notes, info = [], [], {}
    for load, per_host, setting in settings(args, loads, hosts):
        busy = loaded.start_busy(load)
        try:
            loop = {m: {"fuse": [], "MWMS": []} for m in models}
            fit = {m: {"fuse": [], "MWMS": []} for m in models}
            for rnd in range(args.rounds):
                for side in (("fuse", "mwms") if rnd % 2 == 0 else ("mwms", "fuse")):
                    rec = run_side(side, args, tmp, hosts, per_host or 1)
                    for m in models:
                        entry = rec["models"][m]
                        info[m] = {"parameters": entry["parameters"],
                                   "tensors": entry["tensors"]}
                        loop[m][labels[side]].append(common.median(entry["loop_seconds"]))
                        if "fit_seconds_per_step" in entry:
                            fit[m][labels[side]].append(entry["fit_seconds_per_step"])
                        elif "fit_error" in entry:
                            note = f"{labels[side]} {m} model.fit: {entry['fit_error']}"
                            if note not in notes:
                                notes.append(note)
                                print(note, flush=True)
                    info["threads"] = rec["threads"]
        finally:
            loaded.stop_busy(busy)
        for m in models:
            name = MODEL_NAMES[m] if args.size == "full" else f"{m} (tiny)"
            for kind, samples in (("tf.function loop", loop[m]), ("Keras fit", fit[m])):
                if not (samples["fuse"] and samples["MWMS"]):
                    continue
                row = common.comparison(f"{name}, {kind}{setting}, load {load}", samples,
                                        unit="s", competitor="MWMS", model=m, kind=kind,
                                        load=load, hosts=bool(hosts),
                                        workers=2 * (per_host or 1), **info[m])
                rows.append(row)
                med = row["median"]
                print(f"load {load}{setting}, {m}, {kind}: fuse {med['fuse'] * 1e3:.1f} ms, "
                      f"MWMS {med['MWMS'] * 1e3:.1f} ms, fuse/MWMS {row['ratio']:.2f}",
                      flush=True)
    return rows, notes, info


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_step_options(ap, "TensorFlow intra-op and inter-op threads per worker, both sides")
    ap.add_argument("--fit", action="store_true", help="also time Keras model.fit")
    ap.add_argument("--hosts", action="store_true",
                    help="one worker on each of 2 network-namespace hosts (scripts/cluster.sh, "
                         "needs root) instead of both on this one")
    ap.add_argument("--rate", default="1gbit", help="the hosts' link rate, tc syntax")
    ap.add_argument("--per-host", default="1",
                    type=lambda text: [int(r) for r in text.split(",") if r.strip()],
                    help="with --hosts: workers on each host, a list (1: 2x1, 2: 2x2)")
    ap.add_argument("--job-name", default=None,
                    help="the record's job name (default tensorflow_step, or tensorflow_hosts "
                         "with --hosts)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    # fuserun, and the editable install's rebuild on import, want this environment's tools
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    loads = ([] if args.no_quiet else [0]) + ([args.load] if args.load > 0 else [])
    hosts = None
    if args.hosts:
        reason = multihost.why_not()
        if reason is not None:
            sys.exit(f"tf_step.py --hosts: {reason}")
        hosts = multihost.Cluster(2, args.rate)
    try:
        with tempfile.TemporaryDirectory(prefix="fuse-tf.") as tmp:
            os.chmod(tmp, 0o755)     # the hosts' workers write rank 0's record here
            rows, notes, info = measure(args, models, loads, tmp, hosts)
    finally:
        if hosts is not None:
            hosts.down()
    described = machine.describe()
    # the hosts' run is a job of its own in the suite's record (merged beside the local one)
    name = args.job_name or ("tensorflow_hosts" if hosts else "tensorflow_step")
    layouts = [f"2x{r}" for r in args.per_host] if hosts else None
    common.write_json(args.json, common.job_record(
        name, rows, described,
        vars(args) | {"workers": [2 * r for r in args.per_host] if hosts else 2,
                      "layouts": layouts, "threads": info.get("threads"),
                      "link_GBps": multihost.rate_gbytes(args.rate) if hosts else None,
                      "launchers": {"fuse": "fuserun -np N (-H a:R,b:R across hosts)",
                                    "MWMS": "one process per worker, TF_CONFIG with every "
                                            "worker's address, "
                                            "CommunicationImplementation.RING"}},
        notes=notes))


if __name__ == "__main__":
    main()
