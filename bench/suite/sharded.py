"""Sharded optimizer state: fuse with and without ``sharded=True`` against DDP and DDP +
``ZeroRedundancyOptimizer``, AdamW, on one host.

    python bench/suite/sharded.py [--sizes 2,4] [--models resnet50,transformer] [--rounds 2]
                                  [--steps 5] [--load 0] [--json f]

For each model (bench/suite/models.py: the ResNet-50-shaped and the transformer-shaped
parameter sets) and each number of ranks, every side (bench/suite/sharded_worker.py) runs as
its own job, started the usual way: fuse under ``fuserun -np N``, DDP under ``torchrun
--nproc_per_node N``; rounds alternate the order of the sides.  A job times ``--steps`` steps
after 2 warm-up steps; a side's step time is the median over rounds of rank 0's median step.
Memory, from the last round: the most optimizer-state bytes any rank holds and the largest
peak RSS of any rank.  ``--load N`` runs N ``while True: pass`` processes beside every job.
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

WORKER = os.path.join(HERE, "sharded_worker.py")
SIDES = ("fuse", "fuse_sharded", "ddp", "ddp_zero")
LABELS = {"fuse": "fuse", "fuse_sharded": "fuse sharded", "ddp": "DDP",
          "ddp_zero": "DDP + ZeRO"}
JOB_TIMEOUT = 300


def side_argv(side: str, model: str, size: int, steps: int, json_path: str) -> list[str]:
    worker = [WORKER, "--side", side, "--model", model, "--steps", str(steps),
              "--json", json_path]
    if side.startswith("fuse"):
        return [loaded.fuserun(), "-np", str(size), sys.executable, *worker]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(size),
            "--master_addr", "127.0.0.1", "--master_port", str(common.free_port()), *worker]


def run_side(side: str, model: str, size: int, steps: int, tmp: str) -> list[dict]:
    """Launch one side's job; every rank's record."""
    path = os.path.join(tmp, f"{side}-{model}-{size}.json")
    for old in glob.glob(path + ".*"):
        os.unlink(old)
    proc = subprocess.Popen(side_argv(side, model, size, steps, path),
                            env=loaded.launcher_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=JOB_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise RuntimeError(f"the {side} job ({model}, {size} ranks) exceeded {JOB_TIMEOUT} s")
    parts = sorted(glob.glob(path + ".*"))
    if proc.returncode != 0 or len(parts) != size:
        tail = "\n".join(out.decode(errors="replace").splitlines()[-20:])
        raise RuntimeError(f"the {side} job ({model}, {size} ranks) failed "
                           f"(exit {proc.returncode}):\n{tail}")
    records = []
    for part in parts:
        with open(part) as f:
            records.append(json.load(f))
    return sorted(records, key=lambda r: r["rank"])


def measure(model: str, size: int, rounds: int, steps: int, load: int, tmp: str) -> dict:
    """One row: every side's step time over ``rounds``, its memory, ratios to DDP + ZeRO."""
    samples = {LABELS[s]: [] for s in SIDES}
    memory = {}
    for rnd in range(rounds):
        for side in (SIDES if rnd % 2 == 0 else SIDES[::-1]):
            records = run_side(side, model, size, steps, tmp)
            samples[LABELS[side]].append(records[0]["median_step_s"])
            memory[LABELS[side]] = {
                "state_bytes_per_rank": [r["state_bytes"] for r in records],
                "peak_rss_bytes_per_rank": [r["peak_rss_bytes"] for r in records],
                "threads": records[0]["threads"]}
    name = "ResNet-50-shaped" if model == "resnet50" else "transformer-shaped"
    row = common.comparison(f"{name}, {size} ranks, load {load}", samples, unit="s",
                            fuse=LABELS["fuse_sharded"], competitor=LABELS["ddp_zero"],
                            model=model, size=size, load=load, memory=memory)
    zero = memory[LABELS["ddp_zero"]]
    row["ratios_to_ddp_zero"] = {
        label: {"step": common.ratio(row["median"][label], row["median"][LABELS["ddp_zero"]]),
                "state": common.ratio(max(m["state_bytes_per_rank"]),
                                      max(zero["state_bytes_per_rank"])),
                "peak_rss": common.ratio(max(m["peak_rss_bytes_per_rank"]),
                                         max(zero["peak_rss_bytes_per_rank"]))}
        for label, m in memory.items()}
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="2,4")
    ap.add_argument("--models", default="resnet50,transformer")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--load", type=int, default=0, help="busy processes beside every job")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = []
    busy = loaded.start_busy(args.load)
    try:
        with tempfile.TemporaryDirectory(prefix="fuse-sharded.") as tmp:
            for model in args.models.split(","):
                for size in (int(s) for s in args.sizes.split(",")):
                    row = measure(model, size, args.rounds, args.steps, args.load, tmp)
                    rows.append(row)
                    print(row["case"] + ": " + "; ".join(
                        f"{label} {row['median'][label] * 1e3:.0f} ms, state "
                        f"{common.format_bytes(max(m['state_bytes_per_rank']))}/rank, peak RSS "
                        f"{common.format_bytes(max(m['peak_rss_bytes_per_rank']))}"
                        for label, m in row["memory"].items()), flush=True)
    finally:
        loaded.stop_busy(busy)
    common.write_json(args.json, common.job_record(
        "sharded", rows, machine.describe(),
        vars(args) | {"optimizer": "AdamW", "launchers": {"fuse": "fuserun -np N",
                                                          "DDP": "torchrun --nproc_per_node N"}}))


if __name__ == "__main__":
    main()
