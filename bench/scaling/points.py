"""The measured points the model is checked against, each beside the model's figure.

The points come from the kept results: the suite's multihost workload (bench/results/
multihost.json: 2x1, 4x1 and 2x2 namespace hosts at 1 Gbit/s, the ResNet-50-shaped step and
a 64 MiB allreduce), and bench/scaling/measure.py's run (bench/results/scaling_params.json:
the same step on one host at 2 and 4 ranks and again at 2x1, 4x1 and 2x2 hosts, beside the
parameters; 4 hosts x 16 ranks, 1 to 16 MiB allreduces).
All on this machine's 2 cores, which every rank shares.  The torch step on one host reduces its
gradients straight between the ranks' shared slots (``slots``, by ranks); across hosts, and NumPy
allreduces anywhere, go through the engine's staging segments (``shm``).
"""

from __future__ import annotations

import dataclasses

from report import multihost_rows
from model import Cluster, Engine, Link, SharedMemory, Workload, allreduce, simulate_step

CORES = 2
MULTIHOST_CASES = {"step": "ResNet-50-shaped step", "allreduce": "64 MiB allreduce"}
ALLREDUCE_64MIB = 64 << 20


@dataclasses.dataclass
class Point:
    name: str
    source: str          # file and date of the measurement
    measured: float      # seconds
    model: float         # seconds
    checked: bool = True  # one of the points the model must meet (within the tolerance)

    @property
    def error(self) -> float:
        """(model - measured) / measured."""
        return (self.model - self.measured) / self.measured


def layout(text: str, link: Link, shm: SharedMemory, engine: Engine) -> Cluster:
    """This machine's hosts: every rank on the same CORES; a step in which all take part takes
    at least a negotiation among them (one round of every rank's thread)."""
    hosts, local = (int(x) for x in text.split("x"))
    return Cluster(hosts=hosts, local=local, inter=link, shm=shm, cores=CORES,
                   round=engine.collective(hosts * local))


def modelled(kind: str, nbytes: int, cluster: Cluster, engine: Engine,
             work: Workload) -> float:
    if kind == "step":
        return simulate_step(work, cluster, engine).time
    return cluster.collective(engine) + allreduce(nbytes, cluster)


def multihost_points(record: dict, link: Link, shm: SharedMemory, engine: Engine,
                     work: Workload) -> list[Point]:
    source = f"multihost.json, {record['finished'][:10]}"
    points = []
    for row in multihost_rows(record):
        if row["model"] not in MULTIHOST_CASES:
            continue
        cluster = layout(row["layout"], link, shm, engine)
        points.append(Point(f"{row['layout']} hosts, {MULTIHOST_CASES[row['model']]}", source,
                            row["median"]["fuse"],
                            modelled(row["model"], ALLREDUCE_64MIB, cluster, engine, work)))
    return points


def measured_points(params: dict, link: Link, shm: SharedMemory,
                    slots: dict[int, SharedMemory], engine: Engine,
                    work: Workload) -> list[Point]:
    source = f"scaling_params.json, {params['machine_end']['time_utc'][:10]}"
    points = []
    for ranks, seconds in sorted(params.get("one_host_step", {}).items()):
        cluster = layout(f"1x{ranks}", link, slots[int(ranks)], engine)
        points.append(Point(f"1x{ranks} (one host), {MULTIHOST_CASES['step']}", source,
                            seconds, modelled("step", 0, cluster, engine, work)))
    for lay, seconds in params.get("hosts_step", {}).items():
        cluster = layout(lay, link, shm, engine)
        points.append(Point(f"{lay} hosts, {MULTIHOST_CASES['step']}", source, seconds,
                            modelled("step", 0, cluster, engine, work)))
    run = params.get("ranks_64")
    if run:
        cluster = layout(f"4x{run['local_ranks']}", link, shm, engine)
        largest = max(int(size) for size in run["allreduce"])
        for size, seconds in run["allreduce"].items():
            # a 4-byte allreduce travels inline: the negotiation alone
            model = (cluster.collective(engine) if int(size) <= 4
                     else modelled("allreduce", int(size), cluster, engine, work))
            # the largest is the check point; the others show the trend (the tiny one: 64
            # processes on 2 cores each wake for every negotiation, which the model leaves out)
            points.append(Point(f"4x{run['local_ranks']} hosts ({cluster.ranks} ranks), "
                                f"{size_text(int(size))} allreduce", source, seconds, model,
                                checked=int(size) == largest))
    return points


def size_text(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes} B"
