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
  time is  alpha_shm + g * S  on a core of its own (g measured on buffers larger than the
  caches, as a step's gradients are); where the ranks outnumber the cores (this machine: every
  namespace host shares its 2 cores) the cores are shared and that time stretches by P / C.
- **Cores shared by compute and the engine** (only where P ranks share C cores, ``cores`` set;
  GPUs do not share): each rank has two threads that want a core, the one computing and the
  engine's while it works through shared memory (waiting on the link or on rank 0 takes no
  core).  Every busy thread runs at min(1, C / (P x busy threads per rank)): with as many ranks
  as cores the engine's memory work no longer hides behind backward but slows it.  And a step
  of a ring in which every rank takes part cannot end before each rank's thread has had a core:
  on shared cores it costs at least a round of them (``Cluster.round``, set from the measured
  negotiation among as many ranks, which is such a round), much more than the link's
  per-message cost at 64 ranks on 2 cores.
- **The engine**: a fixed cost per collective (negotiation with rank 0, dispatch), growing with
  the ranks rank 0 hears from, and a cost per tensor on the backward thread (the framework's
  gradient hook and the request; for torch on the CPU also writing each gradient into its
  shared slot, a cost per byte).
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
    per tensor submitted (hook, request) and per byte of it the hook writes into its slot; the
    fusion threshold and the cycle time."""
    per_collective: float
    per_rank: float
    per_tensor: float
    fusion_threshold: int = 128 * MIB
    cycle_time: float = 1e-3
    per_gradient_byte: float = 0.0     # the hook's write of a gradient into its slot (s/byte)

    def hook(self, nbytes: int) -> float:
        """The backward thread's cost of handing one gradient of ``nbytes`` to the engine."""
        return self.per_tensor + self.per_gradient_byte * nbytes

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
    # on shared cores, the least time of a step in which every rank takes part: each of their
    # threads must get a core in turn (0: they have processors of their own)
    round: float = 0.0

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
        return 1.0 / self.rate(1)

    def rate(self, busy: int) -> float:
        """The speed of each of a rank's ``busy`` threads that want a core, every rank alike:
        1 on cores of their own, C / (P x busy) where the P ranks' threads outnumber C cores."""
        return 1.0 if self.cores is None else min(1.0, self.cores / (self.ranks * busy))


def ring_allreduce(nbytes: float, ranks: int, link: Link, least_step: float = 0.0) -> float:
    """A ring over ``ranks`` ranks, one per link: 2(N-1) messages of S/N bytes each, a step
    costing at least ``least_step`` (``Cluster.round``)."""
    if ranks < 2:
        return 0.0
    steps = 2 * (ranks - 1)
    return steps * max(link.alpha, least_step) + steps / ranks * nbytes / link.bandwidth


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
    cross = ring_allreduce(seg, cluster.hosts, cluster.inter, cluster.round)
    return local + cross + (count - 1) * max(local, cross)


def allreduce_parts(nbytes: float, cluster: Cluster) -> tuple[float, float]:
    """The path fuse takes for an allreduce of the world, as (memory work: seconds of one core's
    shared-memory work, which the cores' sharing stretches; waiting: the fixed costs and the
    link, seconds).
    Shared memory on one host; across hosts with L > 1 ranks each, hierarchical from the
    threshold (256 KiB) up (every segment's shared-memory stages are the work, the rest of the
    pipeline's time the wait), and below it a flat ring over every rank (the ranks of a host
    next to each other, so one stream crosses each link)."""
    if cluster.hosts == 1:
        return cluster.shm.per_byte * nbytes, cluster.shm.alpha
    if cluster.local == 1:
        return 0.0, ring_allreduce(nbytes, cluster.hosts, cluster.inter, cluster.round)
    if nbytes < cluster.hierarchical_threshold:
        return 0.0, ring_allreduce(nbytes, cluster.ranks, cluster.inter, cluster.round)
    seg = min(segment_bytes(nbytes), nbytes)
    work = math.ceil(nbytes / seg) * cluster.shm.per_byte * seg
    return work, hierarchical_allreduce(nbytes, cluster) - work * cluster.oversubscription


def allreduce(nbytes: float, cluster: Cluster) -> float:
    """One allreduce's time with nothing else wanting the cores."""
    work, wait = allreduce_parts(nbytes, cluster)
    return work * cluster.oversubscription + wait


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


EPSILON = 1e-12


def _take(pending: list[tuple[float, int]], threshold: int) -> int:
    """Bytes of the gradients at the head of ``pending`` that fit in one fusion buffer (at least
    one), removed from it."""
    size, count = 0, 0
    while count < len(pending) and (size == 0 or size + pending[count][1] <= threshold):
        size += pending[count][1]
        count += 1
    del pending[:count]
    return size


def _finish_phases(phases: list[list], buffers: list[list], t: float) -> None:
    """Drop the phases of the buffer in flight that are done; the buffer ends with its last."""
    while phases and phases[0][1] <= EPSILON:
        phases.pop(0)
        buffers[-1][1] = t


def simulate_step(work: Workload, cluster: Cluster, engine: Engine) -> Step:
    """One step on every rank at once (they are alike), event by event.

    The backward thread computes the layers one after the other, each gradient costing its
    compute and the hook.  The engine, when free and holding ready gradients, waits for the
    coordinator's cycle to tick (FUSE_CYCLE_TIME; once backward has ended nothing more can
    fuse, so it goes at once), takes every ready gradient (up to the fusion threshold) and
    reduces them: the negotiation and the link are waits, the shared-memory stages work for a
    core.  While both threads work they share the cores (``Cluster.rate``)."""
    stretch = cluster.oversubscription
    tasks = [(work.forward, None)] + [(c + engine.hook(b), b) for c, b in work.backward]
    if cluster.ranks < 2:
        backward_end = sum(c for c, _ in tasks) * stretch
        return Step(backward_end + work.optimizer * stretch, work.compute * stretch,
                    backward_end, [])
    t, k, left = 0.0, 0, tasks[0][0]
    backward_end = 0.0
    pending: list[tuple[float, int]] = []      # (ready at, bytes), not yet in a buffer
    phases: list[list] = []                    # the buffer in flight: [kind, seconds left]
    buffers: list[list] = []                   # [start, end, bytes]
    while True:
        computing = k < len(tasks)
        _finish_phases(phases, buffers, t)
        hold = None
        if not phases and pending:
            hold = (t if not computing else
                    math.ceil(pending[0][0] / engine.cycle_time - 1e-9) * engine.cycle_time)
            if t >= hold - EPSILON:
                size = _take(pending, engine.fusion_threshold)
                memory, wait = allreduce_parts(size, cluster)
                phases = [["wait", cluster.collective(engine)], ["work", memory],
                          ["wait", wait]]
                buffers.append([t, t, size])
                hold = None
                _finish_phases(phases, buffers, t)
        working = bool(phases) and phases[0][0] == "work"
        rate = cluster.rate(int(computing) + int(working) or 1)
        candidates = []
        if computing:
            candidates.append(left / rate)
        if phases:
            candidates.append(phases[0][1] / rate if working else phases[0][1])
        elif hold is not None:
            candidates.append(hold - t)
        if not candidates:
            break
        dt = min(candidates)
        t += dt
        if computing:
            left -= dt * rate
            if left <= EPSILON:
                if tasks[k][1] is not None:
                    pending.append((t, tasks[k][1]))
                k += 1
                if k < len(tasks):
                    left = tasks[k][0]
                else:
                    backward_end = t
        if phases:
            phases[0][1] -= dt * rate if working else dt
    return Step(t + work.optimizer * stretch, work.compute * stretch, backward_end,
                [tuple(b) for b in buffers])


def efficiency(work: Workload, cluster: Cluster, engine: Engine) -> float:
    """Throughput at N ranks over N times one rank's (one rank alone runs no collective)."""
    alone = dataclasses.replace(cluster, hosts=1, local=1)
    return simulate_step(work, alone, engine).time / simulate_step(work, cluster, engine).time
