"""What the elastic driver and its workers say to each other through the rendezvous store.

The driver numbers each arrangement of the job (a *generation*) and publishes it:

* ``elastic/plan/<g>``: JSON ``{"workers": {worker id: identity}, "added": bool}``; a worker
  id is ``<host>:<slot index on that host>`` (Horovod's ``host:local_rank``), the identity is
  what :meth:`fuse.cluster.hosts.Slot.env` holds (rank, size, local and cross ranks, host).
  ``added`` says whether the generation has workers the previous one had not (then the state
  must be broadcast to them; otherwise a host change needs no sync);
* ``elastic/generation``: the newest ``g``, written after its plan.

Each started process of a worker id is an *incarnation*: the generation it was started for,
which the driver hands it in ``FUSE_ELASTIC_INCARNATION`` and lists in the plan entry
(``incarnation``).  A process whose incarnation is not the plan's (it outlived its launcher's
guard while the driver started another in its place) is refused at the rendezvous.

A worker that wants to join generation ``g`` writes ``elastic/ready/<g>/<id>`` (its
incarnation, or ``1`` when it has none); once every
worker of the plan did, the driver writes ``elastic/go/<g>`` and they all call the backend's
rendezvous together (so nobody sits in Gloo's connect timeout while a slow peer restores).
A worker that had to re-form while the newest generation is still its own (a collective failed
and no worker exited) asks for a new one with ``elastic/reset/<g>/<id>``; the value lists the
ranks its engine found unanswering (``lost 2 5``; a bare ``1`` when none), so the driver can
leave out at once a worker that is cut off from the others but whose ssh session has not
noticed yet.

A worker the driver adds to a running job is started before its generation is published: the
driver records its incarnation (the generation to come) and starts it; the process imports
what it needs, finds the newest generation older than its incarnation, writes
``elastic/warm/<id>`` (its incarnation) and waits.  Only once every added worker is warm does
the driver publish the generation, so the running workers stop training for the rendezvous
and the state's broadcast, not for a new process's start-up.

Every worker process also writes ``elastic/alive/<id>`` (``<incarnation>:<count>``, the count
going up) about once a second from a thread of its own, whatever it is doing: training,
re-forming or waiting at the rendezvous (``exiting`` when its interpreter exits, after which
the thread no longer runs).  A worker whose count stops for the peer timeout
(``FUSE_PEER_TIMEOUT_SECONDS``) is stopped, hung or cut off from the launcher's host: the
driver takes it out of the job as it does a lost one.

Under ``FUSE_STRAGGLER_POLICY=remove`` rank 0 writes ``elastic/straggler/<g>/<n>`` (JSON: the
flagged rank or host, how far behind, what it costs; fuse.worker.straggler) each time its
coordinator names a straggler; the driver decides whether to take it out.
"""

from __future__ import annotations

import json

GENERATION_KEY = "elastic/generation"
PLAN_KEY = "elastic/plan/{g}"
READY_KEY = "elastic/ready/{g}/{worker}"
READY_PREFIX = "elastic/ready/{g}/"
GO_KEY = "elastic/go/{g}"
RESET_KEY = "elastic/reset/{g}/{worker}"
RESET_PREFIX = "elastic/reset/{g}/"
INCARNATION_ENV = "FUSE_ELASTIC_INCARNATION"
WARM_KEY = "elastic/warm/{worker}"
ALIVE_KEY = "elastic/alive/{worker}"
ALIVE_PREFIX = "elastic/alive/"
ALIVE_EXITING = "exiting"       # the count's last value, as the worker's interpreter exits
STRAGGLER_KEY = "elastic/straggler/{g}/{n}"
STRAGGLER_PREFIX = "elastic/straggler/{g}/"

# identity fields of a plan entry, named as Config fields
IDENTITY_FIELDS = ("rank", "size", "local_rank", "local_size", "cross_rank", "cross_size",
                   "hostname")


def worker_id(hostname: str, slot_index: int) -> str:
    return f"{hostname}:{slot_index}"


def encode_plan(identities: dict[str, dict], added: bool) -> bytes:
    return json.dumps({"workers": identities, "added": bool(added)}, sort_keys=True).encode()


def decode_plan(raw: bytes) -> tuple[dict[str, dict], bool]:
    data = json.loads(raw.decode())
    return data["workers"], bool(data["added"])


def encode_reset(lost: list[int], unreachable: list[int] = ()) -> bytes:
    return json.dumps({"lost": sorted(lost), "unreachable": sorted(unreachable)}).encode()


def decode_reset(raw: bytes | None) -> tuple[list[int], list[int]]:
    """What a reset request reports: (ranks that stopped answering, ranks whose hosts the
    reporter cannot reach); both empty for a bare request."""
    try:
        data = json.loads((raw or b"{}").decode(errors="replace"))
    except ValueError:
        return [], []
    if not isinstance(data, dict):
        return [], []

    def ranks(name: str) -> list[int]:
        return sorted({r for r in data.get(name) or [] if isinstance(r, int) and r >= 0})

    return ranks("lost"), ranks("unreachable")
