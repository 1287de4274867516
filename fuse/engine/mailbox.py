"""Shared-memory mailboxes for the control channel when every rank is on one host.

Why: a negotiation over the control channel's loopback socket costs a round trip of system
calls (about 9 us of a 4-byte allreduce's 15 us on a 2-core VM, bench/results/studies/
mpi_small.md); through memory both processes map, the same exchange takes under 1 us.

Each worker makes one segment holding its two rings (to rank 0 and back; the layout and the
protocol are in csrc/mailbox.h) and rank 0 maps every worker's.  Segments are made as the
shared-memory allreduce's are (fuse.engine.shm.new_segment: anonymous memory files that only
the same user can open, through the maker's /proc/<pid>/fd, so there is no name to guess and
nothing left behind) and are closed once mapped.  The mailboxes are used when the job is on one
host (the launcher's local size is the size, and every rank reports the same kernel boot id),
FUSE_MAILBOX is on, and every segment could be made and mapped; otherwise, and in every job
across hosts, frames stay on the sockets.
"""

from __future__ import annotations

import json
import mmap
import os
from typing import Callable

from fuse.engine.channel import MAILBOX_SEGMENT_BYTES
from fuse.engine.shm import discard, host_id, new_segment


def connect(config, exchange: Callable[[bytes], list[bytes]]):
    """The segments this rank's control channel sends and receives through
    (ControlChannel.use_mailboxes): rank 0 a list by rank (index 0: None), a worker its own;
    None when the job does not use mailboxes.  Collective: every rank calls it at start-up
    with ``exchange`` = the backend's allgather of bytes."""
    if not config.mailbox or config.size < 2 or config.local_size != config.size:
        return None
    worker = config.rank != 0
    fd, path = new_segment(MAILBOX_SEGMENT_BYTES, header=False) if worker else (-1, None)
    mapped = None
    try:
        mine = json.dumps({"path": path, "host": host_id(), "made": fd >= 0 or not worker})
        peers = [json.loads(raw) for raw in exchange(mine.encode())]
        usable = all(p["made"] for p in peers) and len({p["host"] for p in peers}) == 1
        if usable:
            mapped = _map(fd, [p["path"] for p in peers], worker)
        agreed = all(raw == b"1" for raw in exchange(b"1" if mapped is not None else b"0"))
    finally:
        if fd >= 0:
            discard(fd, path)
    if not agreed:
        for m in (mapped if isinstance(mapped, list) else [mapped]):
            if m is not None:
                m.close()
        return None
    return mapped


def _map(fd: int, paths: list[str], worker: bool):
    """A worker: its own segment; rank 0: every worker's (None when one cannot be opened)."""
    if worker:
        return mmap.mmap(fd, MAILBOX_SEGMENT_BYTES)
    maps: list = [None]
    try:
        for path in paths[1:]:
            with open(path, "r+b") as f:
                if os.fstat(f.fileno()).st_size < MAILBOX_SEGMENT_BYTES:
                    raise OSError(f"{path}: smaller than a mailbox")
                maps.append(mmap.mmap(f.fileno(), MAILBOX_SEGMENT_BYTES))
    except OSError:
        for m in maps[1:]:
            m.close()
        return None
    return maps
