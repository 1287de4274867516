"""The model's parameters from what bench/scaling/measure.py took on this machine.

Each parameter is read off the measurement that isolates it:

- the engine: a 4-byte allreduce at 2 ranks on one host is one negotiation round trip (it
  travels inline), its cost per collective; at 4 ranks, the extra per rank rank 0 hears from;
- the hooks: the CPU time of the torch step's gradient hooks on the backward thread at 2 ranks
  (bench/scaling/step_cpu.py), per gradient (the request) and per byte (the write into the
  gradient's shared slot);
- the shared gradient slots: the engine threads' CPU time in the same step on one host at the
  same number of ranks, per byte of gradient (it reduces straight between the ranks' slots
  there, and reads from more of them at more ranks);
- shared memory: same-host allreduces from 1 MiB up at 2 and 4 ranks on buffers that are not
  in the cache (each call on another), least squares of
  T = per collective + alpha + per_byte * S * max(1, L / cores) (smaller ones sit in the
  caches and take another path);
- the link: a ring of 2 namespace hosts with nothing inline: the bandwidth from 1-16 MiB, the
  per-message cost from 4 bytes, less the negotiation across the link (a 4-byte allreduce
  inline between the same hosts);
- compute: bench/scaling/step_compute.py's forward, per-gradient backward and optimizer times,
  one copy per core computing at once.
"""

from __future__ import annotations

from typing import Sequence

from model import Engine, Link, SharedMemory, Workload

LARGE = 1 << 20     # sizes whose time is mostly bandwidth


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
    hooks = params["step_cpu"]["2"]
    return Engine(per_collective=per_collective, per_rank=per_rank,
                  per_tensor=hooks["per_gradient_s"], per_gradient_byte=hooks["per_byte_s"])


def shared_memory(params: dict, eng: Engine, cores: int) -> SharedMemory:
    xs, ys = [], []
    for ranks, run in params["one_host"].items():
        stretch = max(1.0, int(ranks) / cores)
        for size, t in run["allreduce"].items():
            if int(size) >= LARGE:
                xs.append(int(size) * stretch)
                ys.append(t - eng.collective(int(ranks)))
    alpha, per_byte = least_squares(xs, ys)
    return SharedMemory(alpha=max(0.0, alpha), per_byte=per_byte)


def slots(params: dict) -> dict[int, SharedMemory]:
    """The one-host step's shared memory by ranks: the engine's reduction between the shared
    gradient slots, work per byte of gradient (its fixed costs are the engine's per
    collective)."""
    return {int(ranks): SharedMemory(alpha=0.0, per_byte=run["engine_per_byte_s"])
            for ranks, run in params["step_cpu"].items()}


def link(params: dict, eng: Engine) -> Link:
    """The ring of 2 across the link (2 messages of S/2: T = negotiation + 2 alpha + S / B),
    the negotiation over the link being a 4-byte allreduce inline between the same hosts.
    B is the slope over the large sizes (beyond the link's token bucket, whose 256 KB burst
    passes at once); alpha is what the 4-byte ring takes beyond the negotiation."""
    across = params["link_negotiation"]["allreduce"]["4"]
    sizes = {int(s): t for s, t in params["link"]["allreduce"].items()}
    large = {s: t for s, t in sizes.items() if s >= LARGE}
    _, per_byte = least_squares(list(large), list(large.values()))
    return Link(alpha=max(0.0, (sizes[4] - across - 4 * per_byte) / 2), bandwidth=1 / per_byte,
                negotiation=max(0.0, across - eng.collective(2)))


def step_workload(params: dict) -> Workload:
    c = params["compute"]
    return Workload(forward=c["forward_s"],
                    backward=list(zip(c["backward_s"], c["gradient_bytes"])),
                    optimizer=c["optimizer_s"])
