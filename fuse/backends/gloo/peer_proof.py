"""Every Gloo connection proves the job's secret before anything else travels on it.

Gloo's TCP listeners accept any connection that sends the sequence number a pair expects
(four bytes); a local process that connects first is taken for the rank it claims, and would
receive that rank's data (the control channel's key among the first).  So as soon as a group's
connections are up, every member challenges every other one over the very connection they
will use: a random nonce each way, answered by an HMAC of the nonce with the job's secret
(FUSE_SECRET_KEY, which the launcher hands its workers), bound to who answers whom in which
group.  A connection that cannot answer fails the start-up with a message naming the rank it
claimed to be, before any data of the job has been sent on it.

Gloo's alltoallv sends each member's block straight over the pair to that member, so each
pair is checked on its own connection.  Jobs without a secret (a store directory shared by
hand) have nothing to prove and skip this.
"""

from __future__ import annotations

import hashlib
import hmac
import os

import numpy as np

from fuse.backends.gloo.errors import GlooError

NONCE_BYTES = 16
PROOF_BYTES = 32


def _answer(secret: bytes, nonce: bytes, answerer: int, challenger: int, group: str) -> bytes:
    msg = b"fuse gloo peer|%s|%d|%d|" % (group.encode(), answerer, challenger) + nonce
    return hmac.new(secret, msg, hashlib.sha256).digest()


def prove_peers(context, ranks: list[int], rank: int, group: str, secret: bytes | None) -> None:
    """Challenge every member of ``context`` (global ``ranks``, this process ``rank``) and
    answer their challenges; GlooError naming the ranks whose connection failed."""
    n = len(ranks)
    if secret is None or n < 2:
        return
    me = ranks.index(rank)
    challenges = np.frombuffer(os.urandom(NONCE_BYTES * n), np.uint8)
    theirs = np.empty(NONCE_BYTES * n, np.uint8)
    answers = np.empty(PROOF_BYTES * n, np.uint8)
    try:
        context.alltoallv(challenges, [NONCE_BYTES] * n, theirs, [NONCE_BYTES] * n)
        mine = b"".join(
            _answer(secret, theirs[NONCE_BYTES * k:NONCE_BYTES * (k + 1)].tobytes(), rank,
                    ranks[k], group) for k in range(n))
        context.alltoallv(np.frombuffer(mine, np.uint8), [PROOF_BYTES] * n, answers,
                          [PROOF_BYTES] * n)
    except GlooError as err:
        raise GlooError(
            f"gloo: rank {rank}'s connections of group {group!r} failed while the ranks proved "
            f"the job's secret to each other ({err}); a process that is not part of the job "
            "may have connected to a Gloo listener in a rank's place (Gloo's listeners accept "
            "any connection)") from err
    liars = [ranks[k] for k in range(n) if k != me and not hmac.compare_digest(
        answers[PROOF_BYTES * k:PROOF_BYTES * (k + 1)].tobytes(),
        _answer(secret, challenges[NONCE_BYTES * k:NONCE_BYTES * (k + 1)].tobytes(), ranks[k],
                rank, group))]
    if liars:
        raise GlooError(
            f"gloo: the connections rank {rank} holds for rank(s) {liars} (group {group!r}) did "
            "not prove the job's secret: a process that is not part of the job connected to a "
            "Gloo listener in their place, or was started with another FUSE_SECRET_KEY; "
            "nothing of the job was sent on them")
