"""Who runs where in one generation of an elastic job.

Hosts keep their order from one generation to the next (the hosts of running workers first,
in the order of their lowest rank, then new hosts in discovery order), so rank 0 stays with
a worker that holds the state and ranks move as little as possible.  Within a host, a worker
keeps its slot index, which is its local rank.
"""

from __future__ import annotations

from fuse.cluster.hosts import HostSpec, Slot, assign_slots
from fuse.cluster.elastic_protocol import worker_id


def order_hosts(hosts: list[HostSpec], previous: dict[str, Slot]) -> list[HostSpec]:
    """``hosts`` with the hosts of ``previous`` (worker id -> slot) first, by lowest rank."""
    first_rank: dict[str, int] = {}
    for slot in previous.values():
        first_rank[slot.hostname] = min(first_rank.get(slot.hostname, slot.rank), slot.rank)
    position = {h.hostname: i for i, h in enumerate(hosts)}
    return sorted(hosts, key=lambda h: (h.hostname not in first_rank,
                                        first_rank.get(h.hostname, 0), position[h.hostname]))


def make_plan(hosts: list[HostSpec], previous: dict[str, Slot],
              max_np: int | None) -> dict[str, Slot]:
    """Worker id -> slot for the next generation, on every slot of ``hosts`` up to ``max_np``."""
    ordered = order_hosts(hosts, previous)
    total = sum(h.slots for h in ordered)
    n = total if max_np is None else min(total, max_np)
    if n == 0:
        return {}
    return {worker_id(s.hostname, s.local_rank): s for s in assign_slots(ordered, n)}


def identity(slot: Slot) -> dict:
    return {"rank": slot.rank, "size": slot.size, "local_rank": slot.local_rank,
            "local_size": slot.local_size, "cross_rank": slot.cross_rank,
            "cross_size": slot.cross_size, "hostname": slot.hostname}
