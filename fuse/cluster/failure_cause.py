"""Why a worker failed, as data: what a worker leaves in the launcher's store beside its error
text (``errors/<rank>``), so that the launcher names the rank that was lost without reading
error messages.

``errors/<rank>/cause`` holds JSON: ``kind`` (``error``: its own exception; ``consequence``: it
failed because another rank did; ``network``: a collective failed in the backend and the
network may be why), ``rank``, ``host``, ``lost`` (ranks its engine found unanswering: their
hosts are down or cut off) and ``unreachable`` (ranks whose hosts it could not reach after the
failure: fuse.worker.peer_probe).
"""

from __future__ import annotations

import dataclasses
import json

KEY = "errors/{rank}/cause"
PREFIX = "errors/"


@dataclasses.dataclass
class Cause:
    kind: str
    rank: int
    host: str
    lost: list[int] = dataclasses.field(default_factory=list)
    unreachable: list[int] = dataclasses.field(default_factory=list)

    def encode(self) -> bytes:
        return json.dumps(dataclasses.asdict(self), sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> "Cause | None":
        try:
            data = json.loads((raw or b"").decode(errors="replace"))
            return cls(str(data["kind"]), int(data["rank"]), str(data["host"]),
                       [int(r) for r in data.get("lost") or []],
                       [int(r) for r in data.get("unreachable") or []])
        except (ValueError, KeyError, TypeError):
            return None


def read_all(server) -> dict[int, Cause]:
    """Every cause a :class:`~fuse.cluster.store.KVStoreServer` holds, by rank."""
    out = {}
    for key in server.keys(PREFIX):
        parts = key.split("/")
        if len(parts) == 3 and parts[2] == "cause" and parts[1].isdigit():
            cause = Cause.decode(server.get(key))
            if cause is not None and cause.rank == int(parts[1]):
                out[cause.rank] = cause
    return out


def lost_rank(causes: dict[int, Cause], hosts: dict[int, str]) -> tuple[int, str] | None:
    """The rank the reports say was lost, and why, or None: a rank another found unanswering
    (the first so named), else one of a pair that could not reach each other (the higher of
    the first pair reported, the lower being the one the job's rank 0 side kept)."""
    def who(r: int) -> str:
        return f"rank {r} (host {hosts[r]})" if r in hosts else f"rank {r}"

    for reporter in sorted(causes):
        for r in causes[reporter].lost:
            return r, (f"it stopped answering its peers (its host is down or cut off by the "
                       f"network), as {who(reporter)} reported")
    for reporter in sorted(causes):
        for r in causes[reporter].unreachable:
            a, b = sorted((reporter, r))
            return b, (f"it and {who(a)} cannot reach each other: the network between their "
                       "hosts is cut")
    return None
