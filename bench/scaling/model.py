"""The arithmetic of a synchronous data-parallel training step at N workers under fuse.

Pure functions and one small event simulation, no I/O: bench/scaling_model.py feeds them
parameters measured on this machine (or stated for a GPU cluster) and prints, checks and plots
what they give.  tests/bench/test_scaling_model.py checks them on cases worked by hand.

What is modelled, and why each term is there:

- **Ring allreduce** of S bytes over N ranks, one per host: 2(N - 1) steps (a reduce-scatter,
  then an allgather), each sending S/N bytes to the next rank over a link of bandwidth B with a
  per-message cost alpha:  T = 2 (N - 1) alpha + 2 (N - 1) / N * S / B.
- **Hierarchical allreduce** (fuse's from FUSE_HIERARCHICAL_THRESHOLD up, H hosts of L ranks):
  a shared-memory reduce-scatter inside each host, a ring across the H hosts in which all L
  local ranks send their shard at once over the host's one link (so the link carries
  2 (H - 1) / H * S), and a shared-memory allgather.  The buffer goes in segments (a quarter
  of it, 1 to 8 MiB, fuse/engine/hierarchy.py), the link carrying one while the host's memory
  works on the next: a two-stage pipeline.
- **Same-host shared memory**: every rank reads and writes about the same bytes per byte of
  buffer whatever L is (its share of the reduction plus copying the result out), so one rank's
  time is  alpha_shm + g * S  on a core of its own; where the ranks outnumber the cores (this
  machine: every namespace host shares its 2 cores) the cores are shared and that time
  stretches by P / C.
- **The engine**: a fixed cost per collective (negotiation with rank 0, dispatch), growing with
  the ranks rank 0 hears from, and a cost per tensor (the gradient hook and the request).
- **Fusion and overlap with backward**: gradients become ready layer by layer during backward;
  the engine thread takes every gradient ready when it is free and the coordinator's cycle
  (FUSE_CYCLE_TIME) has ticked, packs them into buffers of at most FUSE_FUSION_THRESHOLD bytes
  and reduces them one after the other while backward goes on.  The step ends when the last
  buffer is reduced and the optimizer has run.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

MIB = 1 << 20


@dataclasses.dataclass(frozen=True)
class Link:
    """A path between hosts: per-message cost (s) and payload bandwidth (bytes/s), and what a
    negotiation with rank 0 costs over it beyond one on the same host (s)."""
    alpha: float
    bandwidth: float
    negotiation: float = 0.0


@dataclasses.dataclass(frozen=True)
class SharedMemory:
    """The same-host shared-memory allreduce: a fixed cost (s) and seconds per byte of buffer
    on one rank with a core of its own (``per_byte``)."""
    alpha: float
    per_byte: float


@dataclasses.dataclass(frozen=True)
class Engine:
    """fuse's own costs: per collective at 2 ranks, per extra rank rank 0 negotiates with, and
    per tensor submitted (hook, request); the fusion threshold and the cycle time."""
    per_collective: float
    per_rank: float
    per_tensor: float
    fusion_threshold: int = 128 * MIB
    cycle_time: float = 1e-3

    def collective(self, ranks: int) -> float:
        return self.per_collective + self.per_rank * max(0, ranks - 2)


@dataclasses.dataclass(frozen=True)
class Cluster:
    """H hosts of L ranks; ``cores`` the cores all ranks share (None: every rank has its own
    processor, as GPUs do)."""
    hosts: int
    local: int
    inter: Link                 # between hosts
    shm: SharedMemory           # inside a host
    cores: int | None = None
    hierarchical_threshold: int = 256 << 10     # FUSE_HIERARCHICAL_THRESHOLD's default

    @property
    def ranks(self) -> int:
        return self.hosts * self.local

    def collective(self, engine: Engine) -> float:
        """The engine's cost of one collective of the world: its negotiation with rank 0 (over
        the link when the ranks span hosts)."""
        remote = self.inter.negotiation if self.hosts > 1 else 0.0
        return engine.collective(self.ranks) + remote

    @property
    def oversubscription(self) -> float:
        """How much longer a CPU-bound phase takes because the ranks share the cores."""
        return 1.0 if self.cores is None else max(1.0, self.ranks / self.cores)


def ring_allreduce(nbytes: float, ranks: int, link: Link) -> float:
    """A ring over ``ranks`` ranks, one per link: 2(N-1) messages of S/N bytes each."""
    if ranks < 2:
        return 0.0
    steps = 2 * (ranks - 1)
    return steps * link.alpha + steps / ranks * nbytes / link.bandwidth


def shm_allreduce(nbytes: float, shm: SharedMemory, stretch: float = 1.0) -> float:
    """One host's shared-memory allreduce; ``stretch``: the cores' oversubscription."""
    return shm.alpha + shm.per_byte * nbytes * stretch


def segment_bytes(nbytes: float) -> float:
    """The hierarchical allreduce's pipeline segment: a quarter of the buffer, 1 to 8 MiB."""
    return min(max(nbytes / 4, 1 * MIB), 8 * MIB)


def hierarchical_allreduce(nbytes: float, cluster: Cluster) -> float:
    """Shared-memory reduce-scatter, a ring across hosts, shared-memory allgather, pipelined
    in segments: the first segment passes both stages, every further one the slower stage."""
    seg = min(segment_bytes(nbytes), nbytes)
    count = max(1, math.ceil(nbytes / seg))
    local = shm_allreduce(seg, cluster.shm, cluster.oversubscription)
    cross = ring_allreduce(seg, cluster.hosts, cluster.inter)
    return local + cross + (count - 1) * max(local, cross)


def allreduce(nbytes: float, cluster: Cluster) -> float:
    """The path fuse takes for an allreduce of the world: shared memory on one host; across
    hosts with L > 1 ranks each, hierarchical from the threshold (256 KiB) up and below it a
    flat ring over every rank (the ranks of a host next to each other, so one stream crosses
    each link)."""
    if cluster.hosts == 1:
        return shm_allreduce(nbytes, cluster.shm, cluster.oversubscription)
    if cluster.local == 1:
        return ring_allreduce(nbytes, cluster.hosts, cluster.inter)
    if nbytes < cluster.hierarchical_threshold:
        return ring_allreduce(nbytes, cluster.ranks, cluster.inter)
    return hierarchical_allreduce(nbytes, cluster)


@dataclasses.dataclass(frozen=True)
class Workload:
    """One training step on one rank: forward, then backward producing the gradients in
    ``backward`` order (seconds of compute before each, its size in bytes), then the
    optimizer."""
    forward: float
    backward: Sequence[tuple[float, int]]
    optimizer: float

    @property
    def compute(self) -> float:
        return self.forward + sum(t for t, _ in self.backward) + self.optimizer

    @property
    def gradient_bytes(self) -> int:
        return sum(b for _, b in self.backward)


@dataclasses.dataclass
class Step:
    """A simulated step: its time, and where the time went."""
    time: float
    compute: float             # the step's compute on one rank alone (stretched by sharing)
    backward_end: float        # when the last gradient was ready
    buffers: list[tuple[float, float, int]]  # (start, end, bytes) of each fused allreduce

    @property
    def exposed_communication(self) -> float:
        return self.time - self.compute


def fused_buffers(ready: Sequence[tuple[float, int]], engine: Engine,
                  duration) -> list[tuple[float, float, int]]:
    """The fused allreduces of gradients ready at the given times: the engine takes, when it
    is free and the cycle has ticked, every gradient ready by then (up to the fusion
    threshold per buffer); the last gradients go at once (nothing else is pending).
    ``duration(nbytes)`` is one buffer's allreduce time."""
    buffers = []
    free = 0.0
    i = 0
    last_ready = ready[-1][0] if ready else 0.0
    while i < len(ready):
        first = ready[i][0]
        # the coordinator holds a ready gradient until its cycle ticks, unless nothing else
        # is pending (then it goes at once)
        tick = math.ceil(first / engine.cycle_time - 1e-9) * engine.cycle_time
        start = max(free, min(tick, last_ready) if first < last_ready else first)
        size = 0
        while i < len(ready) and ready[i][0] <= start + 1e-12 and (
                size == 0 or size + ready[i][1] <= engine.fusion_threshold):
            size += ready[i][1]
            i += 1
        free = start + duration(size)
        buffers.append((start, free, size))
    return buffers


def simulate_step(work: Workload, cluster: Cluster, engine: Engine) -> Step:
    """One step on every rank at once (they are alike): compute stretched by the cores'
    sharing, each gradient's hook and request, fused allreduces overlapping backward."""
    stretch = cluster.oversubscription
    t = work.forward * stretch
    ready = []
    for compute, nbytes in work.backward:
        t += (compute + engine.per_tensor) * stretch
        ready.append((t, nbytes))
    backward_end = t
    if cluster.ranks < 2:
        buffers = []
        comm_end = backward_end
    else:
        buffers = fused_buffers(
            ready, engine, lambda n: cluster.collective(engine) + allreduce(n, cluster))
        comm_end = max(backward_end, buffers[-1][1])
    total = comm_end + work.optimizer * stretch
    return Step(total, work.compute * stretch, backward_end, buffers)


def efficiency(work: Workload, cluster: Cluster, engine: Engine) -> float:
    """Throughput at N ranks over N times one rank's (one rank alone runs no collective)."""
    alone = dataclasses.replace(cluster, hosts=1, local=1)
    return simulate_step(work, alone, engine).time / simulate_step(work, cluster, engine).time
