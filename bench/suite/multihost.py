"""fuse against DDP across hosts: network-namespace hosts on this machine, links capped.

    sudo python bench/suite/multihost.py [--rate 1gbit] [--layouts 2x1,4x1,2x2] [--rounds 3]
                                   [--steps 5] [--models step,allreduce] [--json f]

The hosts come from scripts/cluster.sh (each a network namespace with its own address and
sshd, joined through a bridge; every link capped at ``--rate`` in both directions with tbf).
For each layout HOSTSxRANKS, fuse runs as its users run it, ``fuserun -np N -H a:R,b:R,...``
from the first host (workers on the others over ssh), and DDP as its users run it, one
``torchrun --nnodes HOSTS --nproc_per_node RANKS`` per host. Workloads
(bench/suite/launched_worker.py): ``step``, the ResNet-50-shaped gradient set (25.6 M float32);
``allreduce``, one 64 MiB float32 allreduce, reported as bandwidth next to what the link
allows for the algorithm used (fuse: hierarchical with several ranks per host, else a ring;
DDP: a flat ring); ``step_powersgd``, the gradient set compressed with PowerSGD at rank 4 from
step 10 (fuse's ``Compression.powersgd`` against DDP's ``powerSGD_hook`` with the same
settings, and uncompressed DDP as a third side; only steps after the start are timed). Rounds
alternate which side runs first; figures are medians over rounds.

All the hosts share this machine's cores, which no launcher can know: each would give its
workers every core. Both sides therefore run with OMP_NUM_THREADS=1 (what torchrun sets and
what fuserun gives 2 workers on 2 cores), and the results say so.

Needs root, iproute2 and openssh-server; without them it writes a note and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import common  # noqa: E402
import machine  # noqa: E402
from common import ALLREDUCE_BYTES  # noqa: E402

WORKER = os.path.join(HERE, "launched_worker.py")
CLUSTER = os.path.join(ROOT, "scripts", "cluster.sh")
# a cluster of its own: the tests' may be up meanwhile (and, with these variables set, another
# run of this script)
NAME = os.environ.get("FUSE_BENCH_CLUSTER_NAME", "fzbench")
NET = os.environ.get("FUSE_BENCH_CLUSTER_NET", "10.233.0")
JOB_TIMEOUT = 600
THREADS = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1"}


def why_not() -> str | None:
    """Why the cluster cannot be made here (None when it can)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if not shutil.which("ip") or not shutil.which("tc"):
        return "needs iproute2 (ip, tc)"
    if not os.access("/usr/sbin/sshd", os.X_OK) or not shutil.which("ssh"):
        return "needs openssh-server and ssh"
    return None


def rate_gbytes(rate: str) -> float:
    """tc's rate ('1gbit', '100mbit') in GB/s."""
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bit": 1.0}
    for unit, scale in units.items():
        if rate.endswith(unit):
            return float(rate[:-len(unit)]) * scale / 8 / 1e9
    raise ValueError(f"cannot read the rate {rate!r} (use e.g. 1gbit, 500mbit)")


class Cluster:
    def __init__(self, hosts: int, rate: str):
        self.env = dict(os.environ, CLUSTER_NAME=NAME, CLUSTER_NET=NET)
        self.dir = os.path.join(tempfile.gettempdir(), f"fuse-cluster-{NAME}")
        self.env["CLUSTER_DIR"] = self.dir
        subprocess.run(["bash", CLUSTER, "down"], env=self.env, capture_output=True)
        subprocess.run(["bash", CLUSTER, "up", str(hosts), "--sshd", "--rate", rate],
                       env=self.env, check=True, capture_output=True)
        self.addrs = [f"{NET}.{10 + i}" for i in range(1, hosts + 1)]

    def argv(self, host: int, argv: list[str], env: dict[str, str]) -> list[str]:
        """``argv`` run on host ``host`` (1-based) with ``env`` added."""
        return ["bash", CLUSTER, "exec", str(host), "env",
                *(f"{k}={v}" for k, v in env.items()), *argv]

    def down(self) -> None:
        subprocess.run(["bash", CLUSTER, "down"], env=self.env, capture_output=True)


POWERSGD = ["--powersgd", "4", "--start-iter", "10"]


def worker_args(side: str, model: str, steps: int, path: str, extra=()) -> list[str]:
    return [WORKER, "--side", side, "--model", model, "--steps", str(steps), "--json", path,
            *extra]


def sides_for(model: str) -> list[tuple]:
    """(label, runner, worker model, extra worker arguments) of each side of a workload."""
    if model == "step_powersgd":
        return [("fuse", run_fuse, "step", POWERSGD), ("DDP", run_ddp, "step", POWERSGD),
                ("DDP uncompressed", run_ddp, "step", [])]
    return [("fuse", run_fuse, model, []), ("DDP", run_ddp, model, [])]


def run_fuse(cluster: Cluster, hosts: int, ranks: int, model: str, steps: int,
             path: str, extra=()) -> None:
    launch_fuse(cluster, hosts, ranks, worker_args("fuse", model, steps, path, extra),
                f"fuse {hosts}x{ranks} {model}")


def run_ddp(cluster: Cluster, hosts: int, ranks: int, model: str, steps: int,
            path: str, extra=()) -> None:
    launch_ddp(cluster, hosts, ranks, worker_args("ddp", model, steps, path, extra),
               f"DDP {hosts}x{ranks} {model}")


def launch_fuse(cluster: Cluster, hosts: int, ranks: int, worker: list[str], what: str,
                options=()) -> None:
    """``fuserun -np hosts*ranks -H ... [options]`` of ``python worker...`` from the first
    host, as fuse's users run it (bench/suite/sharded.py and bench/scaling/measure.py use it
    too)."""
    fuserun = os.path.join(os.path.dirname(sys.executable), "fuserun")
    hostlist = ",".join(f"{a}:{ranks}" for a in cluster.addrs[:hosts])
    env = {"PATH": os.environ.get("PATH", ""), **THREADS,
           "FUSE_SSH_ARGS": f"-F {cluster.dir}/ssh_config"}
    argv = cluster.argv(1, [fuserun, "-np", str(hosts * ranks), "-H", hostlist, *options,
                            sys.executable, *worker], env)
    out = subprocess.run(argv, env=cluster.env, capture_output=True, timeout=JOB_TIMEOUT)
    if out.returncode != 0:
        raise RuntimeError(f"{what} failed:\n" + out.stderr.decode(errors="replace")[-3000:])


def launch_ddp(cluster: Cluster, hosts: int, ranks: int, worker: list[str], what: str) -> None:
    """One ``torchrun --nnodes hosts --nproc_per_node ranks`` of ``worker`` per host, as DDP's
    users run it."""
    port = str(common.free_port())
    procs = []
    for node in range(hosts):
        env = {**THREADS, "GLOO_SOCKET_IFNAME": "eth0"}
        argv = cluster.argv(node + 1, [
            sys.executable, "-m", "torch.distributed.run", "--nnodes", str(hosts),
            "--nproc_per_node", str(ranks), "--node_rank", str(node),
            "--master_addr", cluster.addrs[0], "--master_port", port, *worker], env)
        procs.append(subprocess.Popen(argv, env=cluster.env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT))
    failed = []
    for node, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=JOB_TIMEOUT)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise RuntimeError(f"{what} exceeded {JOB_TIMEOUT} s")
        if p.returncode != 0:
            failed.append(f"node {node}: " + out.decode(errors="replace")[-2000:])
    if failed:
        raise RuntimeError(f"{what} failed:\n" + "\n".join(failed))


def measure(cluster, hosts, ranks, model, rounds, steps, tmp) -> dict:
    sides = sides_for(model)
    samples: dict[str, list[float]] = {label: [] for label, *_ in sides}
    threads = {}
    for rnd in range(rounds):
        for label, run, worker_model, extra in (sides if rnd % 2 == 0 else sides[::-1]):
            path = os.path.join(tmp, f"{label.replace(' ', '_')}.json")
            if os.path.exists(path):
                os.unlink(path)
            run(cluster, hosts, ranks, worker_model, steps, path, extra)
            with open(path) as f:
                rec = json.load(f)
            samples[label].append(common.median(rec["step_seconds"]))
            threads[label] = rec["threads"]
    return {"samples": samples, "threads": threads}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", default="1gbit", help="link rate, tc syntax (default 1gbit)")
    ap.add_argument("--layouts", default="2x1,4x1,2x2", help="HOSTSxRANKS, comma-separated")
    ap.add_argument("--models", default="step,allreduce")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--job-name", default="multihost",
                    help="the name of the record (the suite runs one job per group of layouts)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    layouts = [tuple(int(x) for x in lay.split("x")) for lay in args.layouts.split(",")]
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    config = vars(args) | {"threads": THREADS, "link_GBps": rate_gbytes(args.rate)}
    reason = why_not()
    if reason is not None:
        print(f"multihost: skipped: {reason}")
        common.write_json(args.json, common.job_record(args.job_name, [], machine.describe(),
                                                       config, skipped=reason))
        return
    rows = []
    cluster = Cluster(max(h for h, _ in layouts), args.rate)
    try:
        with tempfile.TemporaryDirectory(prefix="fuse-multihost.") as tmp:
            os.chmod(tmp, 0o755)
            for hosts, ranks in layouts:
                for model in models:
                    got = measure(cluster, hosts, ranks, model, args.rounds, args.steps, tmp)
                    n = hosts * ranks
                    what = {"step": "ResNet-50 gradient set", "allreduce": "64 MiB allreduce",
                            "step_powersgd": "ResNet-50 gradient set, PowerSGD rank 4 "
                                             "(DDP: powerSGD_hook)"}[model]
                    row = common.comparison(
                        f"{hosts}x{ranks}, {what}", got["samples"], unit="s",
                        competitor="DDP", layout=f"{hosts}x{ranks}", model=model, workers=n,
                        threads=got["threads"])
                    if "DDP uncompressed" in row["median"]:
                        row["ratio_uncompressed"] = common.ratio(
                            row["median"]["fuse"], row["median"]["DDP uncompressed"])
                    if model == "allreduce":
                        med = row["median"]
                        row["bandwidth_GBps"] = {k: ALLREDUCE_BYTES / 1e9 / v
                                                 for k, v in med.items()}
                        # a flat ring (DDP, and fuse with one rank per host) sends 2(n-1)/n of
                        # the buffer from each rank to the next; with the ranks of a host next
                        # to each other in the ring, one of them sends across the host's link
                        per_link = 2 * (n - 1) / n
                        row["ring_limit_GBps"] = config["link_GBps"] / per_link
                        # fuse's hierarchical allreduce (several ranks per host, the default
                        # from 256 KiB up) sends 2(h-1)/h of it over each host's link
                        row["fuse_algorithm"] = "hierarchical" if ranks > 1 else "ring"
                        row["fuse_limit_GBps"] = (config["link_GBps"] / (2 * (hosts - 1) / hosts)
                                                  if ranks > 1 else row["ring_limit_GBps"])
                    rows.append(row)
                    med = row["median"]
                    print(f"{hosts}x{ranks} {model}: "
                          + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in med.items())
                          + f", fuse/DDP {row['ratio']:.2f}"
                          + (f", fuse/DDP uncompressed {row['ratio_uncompressed']:.2f}"
                             if "ratio_uncompressed" in row else ""), flush=True)
    finally:
        cluster.down()
    common.write_json(args.json, common.job_record(args.job_name, rows, machine.describe(),
                                                   config))


if __name__ == "__main__":
    main()
