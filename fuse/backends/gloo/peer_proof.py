"""Every Gloo connection proves the job's secret before anything else travels on it.

Gloo's TCP listeners accept any connection that sends the sequence number a pair expects
(four bytes); a local process that connects first is taken for the rank it claims, and would
receive that rank's data (the control channel's key among the first).  The check itself is the
backend contract's :func:`fuse.backends.peer_proof.prove_peers`, over the group's alltoallv
(Gloo's sends each member's block straight over the pair to that member, so each pair is
checked on its own connection); this module binds it to the Gloo backend's name and errors.
"""

from __future__ import annotations

from fuse.backends import peer_proof
from fuse.backends.gloo.errors import GlooError



def prove_peers(context, ranks: list[int], rank: int, group: str, secret: bytes | None) -> None:
    """Challenge every member of ``context`` (global ``ranks``, this process ``rank``) and
    answer their challenges; GlooError naming the ranks whose connection failed."""
    peer_proof.prove_peers(context, ranks, rank, group, secret, backend="gloo", error=GlooError,
                           transport_errors=(GlooError,))
