"""Every connection of a group proves the job's secret before anything else travels on it.

For backends whose transport accepts any connection that knows what to send (Gloo's TCP
listeners take a connection that sends the sequence number a pair expects, four bytes, for the
rank it claims): as soon as a group's connections are up, every member challenges every other
one over the very connections the group's collectives will use, with a random nonce each way,
answered by an HMAC of the nonce with the job's secret (FUSE_SECRET_KEY, which the launcher
hands its workers), bound to who answers whom in which group.  A connection that cannot answer
fails the start-up with a message naming the rank it claimed to be, before any data of the job
has been sent on it.

The exchange is two ``Group.alltoallv`` calls, so it checks each pair on its own connection
where the backend's alltoallv sends each member's block straight to that member (Gloo's does;
so does the pygloo plugin's).  Jobs without a secret (a store directory shared by hand) have
nothing to prove and skip it.  Part of the backend contract: fuse's Gloo backend and the
pygloo plugin (plugins/fuse-pygloo) call it from ``create_group``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from typing import Sequence

import numpy as np

NONCE_BYTES = 16
PROOF_BYTES = 32


def _answer(secret: bytes, nonce: bytes, answerer: int, challenger: int, group: str) -> bytes:
    msg = b"fuse gloo peer|%s|%d|%d|" % (group.encode(), answerer, challenger) + nonce
    return hmac.new(secret, msg, hashlib.sha256).digest()


def prove_peers(group, ranks: Sequence[int], rank: int, label: str, secret: bytes | None, *,
                backend: str = "gloo", error: type[Exception] = RuntimeError,
                transport_errors: tuple[type[BaseException], ...] = ()) -> None:
    """Challenge every member of ``group`` (a :class:`fuse.backends.base.Group` of the global
    ``ranks``; this process is ``rank``) and answer their challenges over its alltoallv.

    ``label`` names the group in the HMAC and the messages (the same on every member, e.g. its
    rendezvous prefix).  Raises ``error`` naming ``backend`` and the ranks whose connection
    failed; an exception of ``transport_errors`` raised by the exchange itself is turned into
    ``error`` saying a foreign process may hold the connection."""
    ranks = [int(r) for r in ranks]
    n = len(ranks)
    if secret is None or n < 2:
        return
    me = ranks.index(rank)
    challenges = np.frombuffer(os.urandom(NONCE_BYTES * n), np.uint8)
    theirs = np.empty(NONCE_BYTES * n, np.uint8)
    answers = np.empty(PROOF_BYTES * n, np.uint8)
    try:
        group.alltoallv(challenges, [NONCE_BYTES] * n, theirs, [NONCE_BYTES] * n)
        mine = b"".join(
            _answer(secret, theirs[NONCE_BYTES * k:NONCE_BYTES * (k + 1)].tobytes(), rank,
                    ranks[k], label) for k in range(n))
        group.alltoallv(np.frombuffer(mine, np.uint8), [PROOF_BYTES] * n, answers,
                        [PROOF_BYTES] * n)
    except transport_errors as err:
        raise error(
            f"{backend}: rank {rank}'s connections of group {label!r} failed while the ranks "
            f"proved the job's secret to each other ({err}); a process that is not part of the "
            f"job may have connected to a {backend} listener in a rank's place (Gloo's "
            "listeners accept any connection)") from err
    liars = [ranks[k] for k in range(n) if k != me and not hmac.compare_digest(
        answers[PROOF_BYTES * k:PROOF_BYTES * (k + 1)].tobytes(),
        _answer(secret, challenges[NONCE_BYTES * k:NONCE_BYTES * (k + 1)].tobytes(), ranks[k],
                rank, label))]
    if liars:
        raise error(
            f"{backend}: the connections rank {rank} holds for rank(s) {liars} (group {label!r}) "
            "did not prove the job's secret: a process that is not part of the job connected "
            f"to a {backend} listener in their place, or was started with another "
            "FUSE_SECRET_KEY; nothing of the job was sent on them")
