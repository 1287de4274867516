"""Hierarchical allreduce and allgather for jobs that span hosts with several ranks on each.

Why: a flat ring over N = H hosts x L ranks sends 2 (N - 1) / N of the data out of every rank,
and with the ranks of a host next to each other in the ring each host's link carries one rank's
stream: 1.5 times the data for 2 x 2.  Reducing inside the host first sends each host's data
across once: 2 (H - 1) / H of it, split over its L ranks.

How, for one allreduce of a buffer cut into L shards (the same cut on every host):

1. reduce-scatter among the host's ranks through shared memory: local rank l ends with the
   host's reduction of shard l (``ShmAllreduce::reduce_scatter`` in csrc/shm_allreduce.h);
2. local rank l allreduces shard l with local rank l of every other host, over a connection of
   the job's backend (Gloo or MPI) made for just those ranks, and applies the postscale; all
   local ranks do so at once, so each host's link carries the data once;
3. allgather among the host's ranks through shared memory.

Over a native connection (Gloo) the buffer goes in segments (a quarter of it, 1 to 8 MiB),
pipelined: a second thread sends segment s across while the engine thread reduce-scatters
segment s + 1 and gathers segment s - 1, so the link seldom waits for memory work.

A rank whose step 2 fails still joins step 3 and says so there, so the host's other ranks stop
with an error instead of waiting or using its shard.  The executor (fuse/engine/executor.pyx,
``_reduce_hier``) runs this for the world's process set; other process sets, and jobs whose
layout does not fit, keep the flat allreduce.

Allgather, the other way round: each rank gathers the rows of its peers on the other hosts
over its own connection, puts them in place, then the host's ranks share what they got through
shared memory (``ShmAllreduce::allgather_ranges``).  Each host receives the other hosts' rows
once: for 2 x 2, half of the result, where a flat ring passes three quarters of it over each
link between the hosts.

When: the layout must have H > 1 hosts with the same L > 1 ranks each (the launcher's host names
and local ranks; ranks under one kernel that share memory).  ``FUSE_HIERARCHICAL_ALLREDUCE``
(or ``HOROVOD_HIERARCHICAL_ALLREDUCE``, ``fuserun --hierarchical-allreduce``) = 1 sends every
allreduce that reaches the backend this way, 0 none; unset ("auto"), allreduces of at least
``FUSE_HIERARCHICAL_THRESHOLD`` bytes (256 KiB) go hierarchically.  Smaller ones go flat: their
cost is the number of messages, not the link, and below the inline threshold (64 KiB over the
set) the coordinator reduces them anyway.  ``FUSE_HIERARCHICAL_ALLGATHER`` chooses for
allgather the same way, by the size of the gathered result.  All ranks must ask for the same.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Callable

from fuse.engine import shm

# Backend group ids of the cross-host connections: one per local rank, above the world's twin
# (fuse.worker.lifecycle.TWIN_GROUP_ID) and far above the ids dynamic process sets take.
CROSS_GROUP_ID = (1 << 30) + 1


@dataclasses.dataclass(frozen=True)
class Layout:
    """The job's hosts as this rank sees them."""
    hosts: tuple[tuple[int, ...], ...]  # each host's ranks in local-rank order, by first rank
    host_index: int                     # this rank's host
    local_index: int                    # this rank's place on it

    @property
    def local_ranks(self) -> list[int]:
        return list(self.hosts[self.host_index])

    @property
    def cross_ranks(self) -> list[int]:
        """This rank's peers: the rank with the same local index on every host."""
        return [host[self.local_index] for host in self.hosts]


def _describe(config) -> dict:
    return {"host": config.hostname, "kernel": shm.host_id(), "local_rank": config.local_rank,
            "local_size": config.local_size,
            "mode": f"allreduce {config.hierarchical_allreduce}, "
                    f"allgather {config.hierarchical_allgather}"}


def plan_layout(peers: list[dict], rank: int) -> tuple[Layout | None, str]:
    """The layout from every rank's ``_describe`` (in rank order), or (None, why it does not
    fit a hierarchical allreduce).  ValueError when the ranks ask for different modes."""
    modes = {p["mode"] for p in peers}
    if len(modes) > 1:
        by_mode = {m: [r for r, p in enumerate(peers) if p["mode"] == m] for m in sorted(modes)}
        raise ValueError("FUSE_HIERARCHICAL_ALLREDUCE/_ALLGATHER differ between ranks: "
                         + "; ".join(f"{mode} on ranks {ranks}" for mode, ranks in by_mode.items()))
    hosts: dict[tuple[str, str], list[int]] = {}
    for r, p in enumerate(peers):
        hosts.setdefault((p["host"], p["kernel"]), []).append(r)
    if len(hosts) < 2:
        return None, "the job runs on one host"
    groups = list(hosts.values())
    sizes = {len(g) for g in groups}
    if len(sizes) > 1:
        return None, (f"the hosts run different numbers of ranks "
                      f"({', '.join(f'{h[0]}: {len(g)}' for h, g in hosts.items())})")
    (local,) = sizes
    if local < 2:
        return None, "every host runs one rank"
    ordered = []
    for (host, _kernel), group in hosts.items():
        by_local = sorted(group, key=lambda r: peers[r]["local_rank"])
        if ([peers[r]["local_rank"] for r in by_local] != list(range(local))
                or any(peers[r]["local_size"] != local for r in group)):
            return None, (f"the local ranks on {host} are not 0..{local - 1} "
                          f"(ranks {sorted(group)})")
        ordered.append(tuple(by_local))
    me = next(i for i, g in enumerate(ordered) if rank in g)
    return Layout(tuple(ordered), me, ordered[me].index(rank)), ""


def _map_host_segments(config, exchange: Callable[[bytes], list[bytes]],
                       layout: Layout) -> shm.SharedSegments | None:
    """Shared-memory segments among this host's ranks, or None when one rank of the job could
    not map its host's (then nobody uses them).  Collective over the world."""
    fd, path = shm.new_segment()
    maps = []
    try:
        paths = [raw.decode() for raw in exchange((path or "").encode())]
        mine = [paths[r] for r in layout.local_ranks]
        if all(mine):
            maps = shm.map_all(mine)
        agreed = all(raw == b"1" for raw in exchange(b"1" if maps else b"0"))
    finally:
        if fd >= 0:
            shm.discard(fd, path)
    if not agreed:
        for m in maps:
            m.close()
        return None
    return shm.SharedSegments(maps, layout.local_index, shm.CHUNK_BYTES)


# a threshold no buffer reaches: the engine's "never"
NEVER = (1 << 64) - 1


@dataclasses.dataclass
class Hierarchy:
    """What the engine needs (Engine.install_hierarchy)."""
    layout: Layout
    segments: shm.SharedSegments
    cross_group: object
    min_bytes: int          # allreduces of at least this many bytes go hierarchically
    gather_min_bytes: int   # allgathers likewise

    def local_index(self, size: int) -> list[int]:
        """Every rank's index on its host."""
        index = [0] * size
        for host in self.layout.hosts:
            for i, r in enumerate(host):
                index[r] = i
        return index


def _threshold(mode: str, config) -> int:
    return {"on": 0, "off": NEVER}.get(mode, config.hierarchical_threshold)


def connect(config, backend, log) -> Hierarchy | None:
    """The hierarchical collectives' connections, or None when the job keeps the flat ones.
    Collective: every rank calls it at start-up, after the world connected."""
    if config.size < 2 or config.local_size == config.size:
        return None       # one host (as every rank's launcher says): nothing to exchange
    peers = [json.loads(raw) for raw in backend.exchange(json.dumps(_describe(config)).encode())]
    layout, why = plan_layout(peers, config.rank)
    modes = {"FUSE_HIERARCHICAL_ALLREDUCE": config.hierarchical_allreduce,
             "FUSE_HIERARCHICAL_ALLGATHER": config.hierarchical_allgather}
    if all(mode == "off" for mode in modes.values()):
        return None
    if layout is None:
        forced = [name for name, mode in modes.items() if mode == "on"]
        if forced and config.rank == 0:
            log.warning("%s on but %s; the collectives stay flat", " and ".join(forced), why)
        return None
    segments = _map_host_segments(config, backend.exchange, layout)
    if segments is None:
        if config.rank == 0:
            log.warning("hierarchical collectives: a host's ranks cannot share memory; "
                        "the collectives stay flat")
        return None
    cross = backend.create_group(layout.cross_ranks, CROSS_GROUP_ID + layout.local_index)
    hier = Hierarchy(layout, segments, cross, _threshold(config.hierarchical_allreduce, config),
                     _threshold(config.hierarchical_allgather, config))
    if config.rank == 0:
        def says(n):
            return "never" if n == NEVER else f"from {n} bytes"
        log.info("hierarchical collectives: %d hosts x %d ranks; allreduce %s, allgather %s",
                 len(layout.hosts), len(layout.local_ranks), says(hier.min_bytes),
                 says(hier.gather_min_bytes))
    return hier
