"""Take the scaling model's parameters on this machine, and some of its check points.

    sudo python bench/scaling/measure.py [--rate 1gbit] [--reps 7] [--json f]

In one run, each part its own job:

1. ``compute``: the multihost step's forward, per-gradient backward and optimizer times on one
   thread, one copy per core computing at once as the ranks do (bench/scaling/step_compute.py);
2. ``one host``: fuserun -np 2 and -np 4 on this host: 4 B to 64 MiB allreduces (same-host
   shared memory from 16 KiB up; from 1 MiB up each call on another buffer, none in the cache)
   (the engine's cost per collective, shared memory's throughput);
   ``step_cpu``: the torch step at 2 and 4 ranks, the CPU time of its gradient hooks per
   gradient and per byte written into the shared slots, and of the engine per byte of gradient
   reduced between the slots (bench/scaling/step_cpu.py);
   ``step``: the multihost workload's step (bench/suite/launched_worker.py) on this host at 2
   and 4 ranks, two check points;
3. ``link``: 2 network-namespace hosts x 1 rank over links capped at ``--rate`` (the multihost
   workload's cluster, scripts/cluster.sh): 4 B to 16 MiB allreduces through the ring (nothing
   inline), whose times give the link's per-message cost and bandwidth, and a 4-byte one
   inline, the negotiation's round trip over the link;
4. ``hosts_step``: the multihost workload's step, fuse only, at 2x1, 4x1 and 2x2 hosts (the
   suite's multihost workload has them against DDP; these are beside this run's parameters);
5. ``64 ranks``: 4 hosts x 16 ranks, 1 to 16 MiB allreduces (hierarchical) and a 4-byte one.

Every job runs with OMP_NUM_THREADS=1, as the multihost workload's.  Needs root, iproute2 and
openssh-server for parts 3 to 5 (without them they are skipped and say so).
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

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(BENCH, "suite"))
import machine  # noqa: E402
import multihost  # noqa: E402

WORKER = os.path.join(HERE, "worker.py")
STEP_WORKER = os.path.join(BENCH, "suite", "launched_worker.py")
PROFILE = os.path.join(HERE, "step_compute.py")
ONE_HOST_SIZES = "4,16K,256K,1M,4M,16M,64M"
LINK_SIZES = "4,64K,256K,1M,4M,16M"
STEP_CPU = os.path.join(HERE, "step_cpu.py")
ENV = dict(os.environ, **multihost.THREADS)


def read(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def compute(tmp: str, reps: int) -> dict:
    path = os.path.join(tmp, "compute.json")
    subprocess.run([sys.executable, PROFILE, "--reps", str(2 * reps), "--copies",
                    str(os.cpu_count()), "--json", path], env=ENV, check=True, timeout=600)
    return read(path)


def one_host(tmp: str, ranks: int, reps: int) -> dict:
    path = os.path.join(tmp, f"one_host_{ranks}.json")
    fuserun = os.path.join(os.path.dirname(sys.executable), "fuserun")
    subprocess.run([fuserun, "-np", str(ranks), sys.executable, WORKER, "--sizes",
                    ONE_HOST_SIZES, "--uncached", "--reps", str(reps), "--json", path],
                   env=ENV, check=True, timeout=600)
    return read(path)


def step_cpu(tmp: str, ranks: int, reps: int) -> dict:
    path = os.path.join(tmp, f"step_cpu_{ranks}.json")
    fuserun = os.path.join(os.path.dirname(sys.executable), "fuserun")
    subprocess.run([fuserun, "-np", str(ranks), sys.executable, STEP_CPU, "--steps", str(reps),
                    "--json", path], env=ENV, check=True, timeout=600)
    return read(path)


def one_host_step(tmp: str, ranks: int) -> float:
    """The median step of the multihost workload's model, fuse on one host."""
    path = os.path.join(tmp, f"step_{ranks}.json")
    fuserun = os.path.join(os.path.dirname(sys.executable), "fuserun")
    subprocess.run([fuserun, "-np", str(ranks), sys.executable, STEP_WORKER, "--side", "fuse",
                    "--model", "step", "--steps", "10", "--json", path],
                   env=ENV, check=True, timeout=600)
    return statistics.median(read(path)["step_seconds"])


def across_hosts(cluster, tmp: str, hosts: int, ranks: int, sizes: str, reps: int,
                 extra=()) -> dict:
    path = os.path.join(tmp, f"hosts_{hosts}x{ranks}.json")
    # 16 ranks a host start over ssh at once on 2 cores: more than fuserun's default 30 s
    multihost.launch_fuse(cluster, hosts, ranks,
                          [WORKER, "--sizes", sizes, "--reps", str(reps), "--json", path,
                           *extra], f"scaling {hosts}x{ranks}",
                          options=["--start-timeout", "300"])
    return read(path)


def step_across_hosts(cluster, tmp: str, hosts: int, ranks: int) -> float:
    """The median step of the multihost workload's model, fuse across namespace hosts."""
    path = os.path.join(tmp, f"step_{hosts}x{ranks}.json")
    multihost.launch_fuse(cluster, hosts, ranks,
                          [STEP_WORKER, "--side", "fuse", "--model", "step", "--steps", "5",
                           "--json", path], f"step {hosts}x{ranks}",
                          options=["--start-timeout", "300"])
    return statistics.median(read(path)["step_seconds"])


def save(record: dict, path: str) -> None:
    """Written after every part, so that a part that fails leaves the others' figures."""
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--skip", default="",
                    help="parts to leave out: compute,one_host,step_cpu,step,link,hosts_step,"
                    "64")
    ap.add_argument("--json", default=os.path.join(BENCH, "results", "scaling_params.json"))
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    record = {"machine_start": machine.describe(), "config": vars(args)
              | {"link_GBps": multihost.rate_gbytes(args.rate)}, "notes": []}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fuse-scaling.") as tmp:
        os.chmod(tmp, 0o755)
        if "compute" not in skip:
            record["compute"] = compute(tmp, args.reps)
            save(record, args.json)
        if "one_host" not in skip:
            record["one_host"] = {str(n): one_host(tmp, n, args.reps) for n in (2, 4)}
            save(record, args.json)
        if "step_cpu" not in skip:
            record["step_cpu"] = {str(n): step_cpu(tmp, n, args.reps) for n in (2, 4)}
            save(record, args.json)
        if "step" not in skip:
            record["one_host_step"] = {str(n): one_host_step(tmp, n) for n in (2, 4)}
            save(record, args.json)
        reason = multihost.why_not()
        if reason is not None:
            record["notes"].append(f"across hosts skipped: {reason}")
        elif not {"link", "hosts_step", "64"} <= skip:
            cluster = multihost.Cluster(4, args.rate)
            try:
                if "link" not in skip:
                    record["link"] = across_hosts(cluster, tmp, 2, 1, LINK_SIZES, args.reps,
                                                  ["--no-inline"])
                    record["link_negotiation"] = across_hosts(cluster, tmp, 2, 1, "4",
                                                              args.reps)
                    save(record, args.json)
                if "hosts_step" not in skip:
                    record["hosts_step"] = {f"{h}x{r}": step_across_hosts(cluster, tmp, h, r)
                                            for h, r in ((2, 1), (4, 1), (2, 2))}
                    save(record, args.json)
                if "64" not in skip:
                    record["ranks_64"] = across_hosts(cluster, tmp, 4, 16, "4,1M,4M,16M",
                                                      args.reps)
            finally:
                cluster.down()
    record["machine_end"] = machine.describe()
    record["seconds"] = time.monotonic() - started
    save(record, args.json)
    print(f"wrote {args.json} ({record['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
