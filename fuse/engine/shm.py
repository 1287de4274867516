"""Allreduce through shared memory when every rank of the job is on one host, any backend.

Why: on one host a backend still moves an allreduce through its transport, loopback TCP for
Gloo or an MPI library's shared-memory channel in small cells, copying every byte several
times.  Measured on 2 ranks, a 64 MiB float32 allreduce takes about 45 ms over Gloo and 28-35
ms with the MPICH wheel's ``MPI_Allreduce``; here every rank maps every other rank's segment
and the reduction is split by ownership, which touches each byte about as few times as
possible: 12-15 ms (bench/suite/allreduce.py).

How, for one chunk of the buffer (its ``n`` parts, part ``k`` owned by rank ``k``):

1. every rank copies the parts the others own into its own segment;
2. barrier;
3. the owner of each part reduces it in the caller's buffer, reading the other ranks' copies of
   that part from their segments (the engine's kernels, every dtype and op), applies the
   engine's postscale while the part is in cache, then publishes the result in its own segment,
   where its own copy of the part was never written;
4. barrier;
5. every rank copies the other parts' results out of their owners' segments.

Each part is reduced by one rank only, so all ranks end with the same bits.  Chunks alternate
between two halves of each segment, counted over all calls: a rank writing chunk ``j + 1`` has
passed the first barrier of chunk ``j``, so every rank has finished reading chunk ``j - 1``'s
half (even when that was the last chunk of the previous allreduce).

The loop runs in C++ on the engine thread without the GIL (``fuse/engine/csrc/shm_allreduce.h``),
with barriers of its own on counters in each segment's header page: a short spin, then
sleeping on the late peer's futex word, which its arrival wakes; a peer that died is noticed by its pid instead of being waited for forever.

Tensors that live in shared memory themselves skip the staging: ``share_regions`` gives every
rank a buffer that all the others map too (the torch optimizer keeps its gradients there), and a
buffer that lies in such a region at the same offset on every rank is reduced straight between
the regions: each rank reduces its part from everyone's region and writes the result into
everyone's, one barrier per call.  The ranks compare where their buffers lie at the start of
every call, so a layout that differs between ranks only costs the staging again.

Segments are anonymous memory files (memfd) that every rank opens through the maker's
/proc/<pid>/fd, so no file is ever left behind, however the processes die, and tearing down is
local.  The job is on one
host when the launcher says so (local size = size) and every rank reports the same kernel
boot id; every rank must then open every segment and see every pid, or nobody uses them.
A process set added while the world has segments (so every member is on this host) gets
segments of its own among its members (fuse.worker.lifecycle), and its collectives take the
same paths.
"""

from __future__ import annotations

import json
import mmap
import os
import socket
import struct
import tempfile
from typing import Callable

from fuse.engine.segments import SHM_HEADER_BYTES, SHM_PID_OFFSET, SharedSegments

# One chunk per barrier pair: large enough that the barriers cost little, small enough that a
# part is still in cache when its owner reads it (1 MiB was the fastest of 0.25-16 MiB here).
CHUNK_BYTES = 1 << 20
SEGMENT_BYTES = SHM_HEADER_BYTES + 2 * CHUNK_BYTES
# where the owner's pid goes in its header (ShmHeader in shm_allreduce.h)
PID_OFFSET = SHM_PID_OFFSET


def _shm_dir() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def host_id() -> str:
    """The same for every process under one running kernel, different on other machines."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return socket.gethostname()


# Segments are anonymous memory files (memfd) that peers open through /proc/<pid>/fd/<fd>:
# no name in /dev/shm ever exists, so nothing is left behind however the processes die, and a
# container's small /dev/shm does not limit them.  Where memfd is missing, a file in /dev/shm
# (unlinked once every rank opened it) does the same job, except when every rank dies first.
_memfd_create = getattr(os, "memfd_create", None)


def new_segment(nbytes: int = SEGMENT_BYTES, header: bool = True) -> tuple[int, str | None]:
    """A zeroed segment, with this process's pid in its header if ``header``: (fd, the path
    other processes open it by), or (-1, None) when there is no room for it."""
    fd, path = -1, None
    try:
        if _memfd_create is not None:
            fd = _memfd_create(f"fuse-shm-{os.getpid()}", os.MFD_CLOEXEC)
            path = f"/proc/{os.getpid()}/fd/{fd}"
        else:
            fd, path = tempfile.mkstemp(prefix=f"fuse-shm-{os.getpid()}-", dir=_shm_dir())
        # Reserve the pages now: a mapping that outgrows its filesystem (a container's 64 MB
        # /dev/shm, a memory limit) would otherwise raise SIGBUS on first touch, mid-job.
        os.posix_fallocate(fd, 0, nbytes)
        if header:
            os.pwrite(fd, struct.pack("<q", os.getpid()), PID_OFFSET)
        return fd, path
    except OSError:
        if fd >= 0:
            discard(fd, path)
        return -1, None


def discard(fd: int, path: str | None) -> None:
    """Drop our handle on a segment we made (peers that mapped it keep their mapping)."""
    os.close(fd)
    if path is not None and not path.startswith("/proc/"):
        os.unlink(path)


def map_all(paths: list[str]) -> list[mmap.mmap]:
    """Every rank's segment, mapped; [] if one cannot be opened or its owner's pid is not
    visible from here (another pid namespace: the liveness check would misfire)."""
    maps: list[mmap.mmap] = []
    try:
        for path in paths:
            with open(path, "r+b") as f:
                maps.append(mmap.mmap(f.fileno(), SEGMENT_BYTES))
        for m in maps:
            os.kill(struct.unpack_from("<q", m, PID_OFFSET)[0], 0)
        return maps
    except OSError:
        for m in maps:
            m.close()
        return []


def connect(config, exchange: Callable[[bytes], list[bytes]]) -> SharedSegments | None:
    """The world's shared-memory segments, or None when they cannot be used.  Collective:
    every rank calls it at start-up with ``exchange`` = the backend's allgather of bytes."""
    if config.shm_threshold <= 0 or config.size < 2 or config.local_size != config.size:
        return None
    return connect_members(config.rank, exchange)


def connect_members(index: int, exchange: Callable[[bytes], list[bytes]]) -> SharedSegments | None:
    """Segments of a group of processes, this one the ``index``-th, or None when one of them
    cannot map every segment.  Collective: every member calls it with ``exchange`` = an
    allgather of bytes among the members (called twice)."""
    fd, path = new_segment()
    maps: list[mmap.mmap] = []
    try:
        mine = json.dumps({"path": path, "host": host_id()}).encode()
        peers = [json.loads(raw) for raw in exchange(mine)]
        if all(p["path"] for p in peers) and len({p["host"] for p in peers}) == 1:
            maps = map_all([p["path"] for p in peers])
        # everyone opened everything, or nobody uses it; afterwards the files can go
        agreed = all(raw == b"1" for raw in exchange(b"1" if maps else b"0"))
    finally:
        if fd >= 0:
            discard(fd, path)
    if not agreed:
        for m in maps:
            m.close()
        return None
    return SharedSegments(maps, index, CHUNK_BYTES)


def share_regions(engine, sizes: list[int], allgather: Callable[[object], list]) -> list | None:
    """Shared buffers of ``sizes`` bytes (zeroed ``mmap.mmap`` objects, one per size) that every
    rank of the job maps, registered with the engine's shared-memory allreduce; None when the
    job does not use shared memory or a rank could not map them.  Collective over the world:
    every rank calls it at the same point with its own ``sizes`` (normally the same);
    ``allgather`` is an allgather of Python objects through the engine."""
    if engine.shared_memory is None:
        return None
    files = [new_segment(max(int(n), 1), header=False) for n in sizes]
    maps: list[list[mmap.mmap]] = []
    try:
        peers = allgather({"paths": [path for _fd, path in files], "sizes": list(sizes)})
        usable = all(None not in p["paths"] and len(p["paths"]) == len(sizes) for p in peers)
        if usable:
            try:
                for p in peers:
                    row = []
                    maps.append(row)
                    for path, n in zip(p["paths"], p["sizes"]):
                        with open(path, "r+b") as f:
                            row.append(mmap.mmap(f.fileno(), max(int(n), 1)))
            except OSError:
                usable = False
        agreed = all(allgather(usable))
    finally:
        for fd, path in files:
            if fd >= 0:
                discard(fd, path)
    if not agreed:
        for row in maps:
            for m in row:
                m.close()
        return None
    for r in range(len(sizes)):
        engine.add_shared_region([row[r] for row in maps], [p["sizes"][r] for p in peers])
    me = engine.rank
    return [maps[me][r] for r in range(len(sizes))]
