"""The model's prediction for ResNet-101 on a GPU cluster, and what limits it.

What limits the efficiency is found by taking one cost away at a time and simulating again:
the per-message latency (the 2 (H - 1) ring steps of every segment, the per-collective and
per-tensor costs of the engine), the bandwidth (an endless link), the fusion cycle (a cycle of
zero: every gradient goes as soon as the engine is free), the flat ring that buffers below the
hierarchical threshold take (2 (N - 1) steps over all N ranks) and the overlap with backward
(without it every allreduce waits for the end of backward).
"""

from __future__ import annotations

import dataclasses

import gpus
from model import Cluster, Engine, Link, Workload, efficiency, simulate_step

GPU_COUNTS = [8, 16, 32, 64, 128, 256, 512]
RATES_GBIT = [25, 100]


def curve(work: Workload, engine: Engine, measured: Link, line_rate: float,
          rate_gbit: float, local: int = gpus.GPUS_PER_HOST) -> list[tuple[int, float]]:
    return [(n, efficiency(work, gpus.cluster(n, rate_gbit, measured, line_rate, local),
                           engine))
            for n in GPU_COUNTS]


ALPHAS_US = [5, 10, 25, 50, 100, 200]


def by_latency(work: Workload, engine: Engine, cluster: Cluster) -> list[tuple[float, float]]:
    """The efficiency with other per-message costs between hosts (s, efficiency)."""
    return [(a * 1e-6, efficiency(work, dataclasses.replace(
        cluster, inter=dataclasses.replace(cluster.inter, alpha=a * 1e-6)), engine))
        for a in ALPHAS_US]


def without_overlap(work: Workload) -> Workload:
    """The same compute, every gradient ready only when backward ends."""
    total = sum(t for t, _ in work.backward)
    return dataclasses.replace(work, backward=[(total, work.backward[0][1])]
                               + [(0.0, b) for _, b in work.backward[1:]])


def limits(work: Workload, engine: Engine, cluster: Cluster) -> dict[str, float]:
    """The efficiency as modelled, and with each cost taken away in turn."""
    fast_link = dataclasses.replace(cluster.inter, bandwidth=float("inf"))
    no_latency = dataclasses.replace(
        cluster, inter=dataclasses.replace(cluster.inter, alpha=0.0),
        shm=dataclasses.replace(cluster.shm, alpha=0.0))
    quiet_engine = dataclasses.replace(engine, per_collective=0.0, per_rank=0.0,
                                       per_tensor=0.0, per_gradient_byte=0.0)
    return {
        "as modelled": efficiency(work, cluster, engine),
        "no per-message latency, no engine cost": efficiency(work, no_latency, quiet_engine),
        "no engine cost": efficiency(work, cluster, quiet_engine),
        "endless inter-host bandwidth": efficiency(
            work, dataclasses.replace(cluster, inter=fast_link), engine),
        "fusion cycle 0": efficiency(work, cluster,
                                     dataclasses.replace(engine, cycle_time=1e-9)),
        "every buffer hierarchical (FUSE_HIERARCHICAL_ALLREDUCE=1)": efficiency(
            work, dataclasses.replace(cluster, hierarchical_threshold=0), engine),
        "no overlap with backward": efficiency(without_overlap(work), cluster, engine),
    }


def breakdown(work: Workload, engine: Engine, cluster: Cluster) -> dict[str, float]:
    """Where one step's time goes, in seconds."""
    step = simulate_step(work, cluster, engine)
    busy = sum(end - start for start, end, _ in step.buffers)
    return {"step": step.time, "compute": step.compute,
            "exposed communication": step.exposed_communication,
            "allreduce time in all": busy, "fused allreduces": len(step.buffers),
            "largest buffer MiB": max((b for *_, b in step.buffers), default=0) / (1 << 20)}
