"""Sharded optimizer state: fuse with and without ``sharded=True`` against DDP and DDP +
``ZeroRedundancyOptimizer``, AdamW, on one host (quiet and beside busy processes) and on
network-namespace hosts.

    python bench/suite/sharded.py [--sizes 2,4] [--models resnet50,transformer] [--rounds 2]
                                  [--steps 5] [--loads 0,1] [--layouts 2x2] [--rate 1gbit]
                                  [--job-name sharded] [--json f]

For each model (bench/suite/models.py: the ResNet-50-shaped and the transformer-shaped
parameter sets) and each setting, every side (bench/suite/sharded_worker.py) runs as its own
job, started the usual way: fuse under ``fuserun -np N``, DDP under ``torchrun
--nproc_per_node N``; rounds alternate the order of the sides.  One-host settings: each
number of ranks of ``--sizes`` at each ``--loads`` level (N ``while True: pass`` processes
beside every job, as bench/suite/loaded.py runs them).  Multi-host settings: each
HOSTSxRANKS of ``--layouts`` on hosts made by scripts/cluster.sh with links capped at
``--rate`` (needs root; bench/suite/multihost.py makes them and launches the sides as their
users do: ``fuserun -H`` from the first host, one ``torchrun`` per host; one thread per
worker, as the hosts share this machine's cores).  A job times ``--steps`` steps after 2
warm-up steps; a side's step time is the median over rounds of rank 0's median step.
Memory, from the last round: the most optimizer-state bytes any rank holds and the largest
peak RSS of any rank.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402
import loaded  # noqa: E402
import machine  # noqa: E402
import multihost  # noqa: E402

WORKER = os.path.join(HERE, "sharded_worker.py")
SIDES = ("fuse", "fuse_sharded", "ddp", "ddp_zero")
LABELS = {"fuse": "fuse", "fuse_sharded": "fuse sharded", "ddp": "DDP",
          "ddp_zero": "DDP + ZeRO"}
JOB_TIMEOUT = 300


def worker_argv(side: str, model: str, steps: int, json_path: str) -> list[str]:
    return [WORKER, "--side", side, "--model", model, "--steps", str(steps), "--json", json_path]


def side_argv(side: str, model: str, size: int, steps: int, json_path: str) -> list[str]:
    worker = worker_argv(side, model, steps, json_path)
    if side.startswith("fuse"):
        return [loaded.fuserun(), "-np", str(size), sys.executable, *worker]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(size),
            "--master_addr", "127.0.0.1", "--master_port", str(common.free_port()), *worker]


def launch_here(side: str, model: str, size: int, steps: int, path: str) -> None:
    """One side's job on this host."""
    proc = subprocess.Popen(side_argv(side, model, size, steps, path),
                            env=loaded.launcher_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=JOB_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise RuntimeError(f"the {side} job ({model}, {size} ranks) exceeded {JOB_TIMEOUT} s")
    if proc.returncode != 0:
        tail = "\n".join(out.decode(errors="replace").splitlines()[-20:])
        raise RuntimeError(f"the {side} job ({model}, {size} ranks) failed "
                           f"(exit {proc.returncode}):\n{tail}")


def launcher_on(cluster, hosts: int, ranks: int):
    """``launch(side, model, size, steps, path)`` on ``hosts`` of ``cluster``, ``ranks`` each."""
    def launch(side: str, model: str, size: int, steps: int, path: str) -> None:
        run = multihost.launch_fuse if side.startswith("fuse") else multihost.launch_ddp
        run(cluster, hosts, ranks, worker_argv(side, model, steps, path),
            f"the {side} job ({model}, {hosts}x{ranks})")
    return launch


def run_side(launch, side: str, model: str, size: int, steps: int, tmp: str) -> list[dict]:
    """Launch one side's job; every rank's record."""
    path = os.path.join(tmp, f"{side}-{model}-{size}.json")
    for old in glob.glob(path + ".*"):
        os.unlink(old)
    launch(side, model, size, steps, path)
    parts = sorted(glob.glob(path + ".*"))
    if len(parts) != size:
        raise RuntimeError(f"the {side} job ({model}, {size} ranks) wrote {len(parts)} "
                           f"records, not {size}")
    records = []
    for part in parts:
        with open(part) as f:
            records.append(json.load(f))
    return sorted(records, key=lambda r: r["rank"])


def measure(launch, setting: str, model: str, size: int, rounds: int, steps: int, tmp: str,
            **where) -> dict:
    """One row: every side's step time over ``rounds``, its memory, ratios to DDP + ZeRO."""
    samples = {LABELS[s]: [] for s in SIDES}
    memory = {}
    for rnd in range(rounds):
        for side in (SIDES if rnd % 2 == 0 else SIDES[::-1]):
            records = run_side(launch, side, model, size, steps, tmp)
            samples[LABELS[side]].append(records[0]["median_step_s"])
            memory[LABELS[side]] = {
                "state_bytes_per_rank": [r["state_bytes"] for r in records],
                "peak_rss_bytes_per_rank": [r["peak_rss_bytes"] for r in records],
                "threads": records[0]["threads"]}
    name = "ResNet-50-shaped" if model == "resnet50" else "transformer-shaped"
    row = common.comparison(f"{name}, {setting}", samples, unit="s",
                            fuse=LABELS["fuse_sharded"], competitor=LABELS["ddp_zero"],
                            model=model, size=size, memory=memory, **where)
    zero = memory[LABELS["ddp_zero"]]
    row["ratios_to_ddp_zero"] = {
        label: {"step": common.ratio(row["median"][label], row["median"][LABELS["ddp_zero"]]),
                "state": common.ratio(max(m["state_bytes_per_rank"]),
                                      max(zero["state_bytes_per_rank"])),
                "peak_rss": common.ratio(max(m["peak_rss_bytes_per_rank"]),
                                         max(zero["peak_rss_bytes_per_rank"]))}
        for label, m in memory.items()}
    return row


def report(row: dict) -> None:
    print(row["case"] + ": " + "; ".join(
        f"{label} {row['median'][label] * 1e3:.0f} ms, state "
        f"{common.format_bytes(max(m['state_bytes_per_rank']))}/rank, peak RSS "
        f"{common.format_bytes(max(m['peak_rss_bytes_per_rank']))}"
        for label, m in row["memory"].items()), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="2,4", help="ranks on one host")
    ap.add_argument("--models", default="resnet50,transformer")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--loads", default="0", help="busy processes beside the one-host jobs: "
                    "one setting per level")
    ap.add_argument("--layouts", default="", help="HOSTSxRANKS on namespace hosts (root)")
    ap.add_argument("--rate", default="1gbit", help="the hosts' link rate, tc syntax")
    ap.add_argument("--job-name", default="sharded",
                    help="the name of the record (the suite runs one job per setting)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    models = args.models.split(",")
    rows, skipped = [], []
    here = launch_here
    with tempfile.TemporaryDirectory(prefix="fuse-sharded.") as tmp:
        os.chmod(tmp, 0o755)
        for load in (int(x) for x in args.loads.split(",") if x.strip()):
            busy = loaded.start_busy(load)
            try:
                for model in models:
                    for size in (int(s) for s in args.sizes.split(",")):
                        row = measure(here, f"{size} ranks, load {load}", model, size,
                                      args.rounds, args.steps, tmp, load=load)
                        rows.append(row)
                        report(row)
            finally:
                loaded.stop_busy(busy)
        layouts = [tuple(int(x) for x in lay.split("x"))
                   for lay in args.layouts.split(",") if lay.strip()]
        reason = multihost.why_not() if layouts else None
        if reason is not None:
            skipped.append(f"hosts {args.layouts}: {reason}")
            print(f"sharded: hosts {args.layouts} skipped: {reason}", flush=True)
        elif layouts:
            cluster = multihost.Cluster(max(h for h, _ in layouts), args.rate)
            try:
                for hosts, ranks in layouts:
                    for model in models:
                        row = measure(launcher_on(cluster, hosts, ranks),
                                      f"{hosts}x{ranks} hosts at {args.rate}", model,
                                      hosts * ranks, args.rounds, args.steps, tmp, load=0,
                                      layout=f"{hosts}x{ranks}", rate=args.rate)
                        rows.append(row)
                        report(row)
            finally:
                cluster.down()
    extra = {"skipped": "; ".join(skipped)} if skipped else {}
    common.write_json(args.json, common.job_record(
        args.job_name, rows, machine.describe(),
        vars(args) | {"optimizer": "AdamW", "launchers": {"fuse": "fuserun -np N",
                                                          "DDP": "torchrun --nproc_per_node N"},
                      "threads_on_hosts": multihost.THREADS}, **extra))


if __name__ == "__main__":
    main()
