"""The model's parameters from what bench/scaling/measure.py took on this machine.

Each parameter is read off the measurement that isolates it:

- the engine: a 4-byte allreduce at 2 ranks on one host is one negotiation round trip (it
  travels inline), its cost per collective; at 4 ranks, the extra per rank rank 0 hears from;
  the slope of a burst of K tiny allreduces over K, its cost per tensor;
- shared memory: same-host allreduces from 16 KiB up at 2 and 4 ranks, least squares of
  T = per collective + alpha + per_byte * S * max(1, L / cores);
- the link: a ring of 2 namespace hosts, 256 KiB to 16 MiB, least squares of
  T = per collective + 2 alpha + S / B;
- compute: bench/scaling/profile.py's forward, per-gradient backward and optimizer times.
"""

from __future__ import annotations

from typing import Sequence

from model import Engine, Link, SharedMemory, Workload

SHM_FROM = 16 << 10     # FUSE_SHM_THRESHOLD: same-host shared memory from here up


def least_squares(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(intercept, slope) of the straight line closest to the points."""
    n = len(xs)
    if n < 2:
        raise ValueError(f"a line needs 2 points or more, got {n}")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("a line needs points at 2 sizes or more")
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - slope * mx, slope


def engine(params: dict) -> Engine:
    two, four = params["one_host"]["2"], params["one_host"]["4"]
    per_collective = two["allreduce"]["4"]
    per_rank = max(0.0, (four["allreduce"]["4"] - per_collective) / 2)
    burst = sorted((int(k), v) for k, v in two["burst"].items())
    _, per_tensor = least_squares([k for k, _ in burst], [v for _, v in burst])
    return Engine(per_collective=per_collective, per_rank=per_rank, per_tensor=per_tensor)


def shared_memory(params: dict, eng: Engine, cores: int) -> SharedMemory:
    xs, ys = [], []
    for ranks, run in params["one_host"].items():
        stretch = max(1.0, int(ranks) / cores)
        for size, t in run["allreduce"].items():
            if int(size) >= SHM_FROM:
                xs.append(int(size) * stretch)
                ys.append(t - eng.collective(int(ranks)))
    alpha, per_byte = least_squares(xs, ys)
    return SharedMemory(alpha=max(0.0, alpha), per_byte=per_byte)


def link(params: dict, eng: Engine) -> Link:
    sizes = params["link"]["allreduce"]
    xs = [int(s) for s in sizes]
    ys = [t - eng.collective(2) for t in sizes.values()]
    twice_alpha, per_byte = least_squares(xs, ys)
    return Link(alpha=max(0.0, twice_alpha / 2), bandwidth=1 / per_byte)


def step_workload(params: dict) -> Workload:
    c = params["compute"]
    return Workload(forward=c["forward_s"],
                    backward=list(zip(c["backward_s"], c["gradient_bytes"])),
                    optimizer=c["optimizer_s"])
