"""The contract a communication backend plugin fulfils.

A backend is a class registered in the entry-point group ``fuse.backends``.  The engine makes one
instance per process (``Backend(config)``), asks it for a :class:`Group` per process set, and
drives collectives on flat host buffers.  Negotiation, fusion, scaling and error reporting live in
the engine; a backend only moves bytes.

Fast path: ``Group.native_ops()`` may return a PyCapsule named ``"fuse.group_ops.v1"`` holding a
``fuse_group_ops`` table (see ``fuse/backends/fuse_backend.h``); the engine then calls it without
the GIL.  Otherwise the engine calls the Python methods below with the GIL held.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar, Sequence

import numpy as np


class Group(abc.ABC):
    """The members of one process set, as the backend sees them.

    ``rank`` and ``size`` are positions inside the group.  All buffers are 1-D contiguous numpy
    arrays; for bfloat16 the engine passes a uint16 view (:func:`dtype_name_to_numpy`) and
    ``dtype`` says ``"bfloat16"``.
    ``op`` is one of ``"sum"``, ``"min"``, ``"max"``, ``"product"``.  Each method is collective
    over the group and raises on failure (the message is shown to the user).
    """

    rank: int
    size: int

    def native_ops(self) -> Any | None:
        """A ``fuse.group_ops.v1`` capsule for GIL-free calls, or None."""
        return None

    @abc.abstractmethod
    def allreduce(self, buf: np.ndarray, dtype: str, op: str) -> None:
        """Reduce ``buf`` in place across the group."""

    @abc.abstractmethod
    def allgatherv(self, sendbuf: np.ndarray, recvbuf: np.ndarray,
                   recvbytes: Sequence[int]) -> None:
        """Gather every member's bytes into ``recvbuf`` (uint8), member after member."""

    @abc.abstractmethod
    def broadcast(self, buf: np.ndarray, root: int) -> None:
        """Copy ``buf`` (uint8) from group rank ``root`` to everyone."""

    @abc.abstractmethod
    def alltoallv(self, sendbuf: np.ndarray, sendbytes: Sequence[int], recvbuf: np.ndarray,
                  recvbytes: Sequence[int]) -> None:
        """Send block i of ``sendbuf`` to member i; receive member i's block into ``recvbuf``."""

    def reducescatter(self, buf: np.ndarray, recvcounts: Sequence[int], dtype: str,
                      op: str) -> None:
        """Leave this member's block of the reduction at the front of ``buf``.

        The default reduces everything and moves the block; backends may do better.  (The
        engine also uses it for a native ops table without ``reducescatter``.)"""
        self.allreduce(buf, dtype, op)
        start = int(sum(recvcounts[: self.rank]))
        n = int(recvcounts[self.rank])
        if start:
            buf[:n] = buf[start:start + n].copy()

    @abc.abstractmethod
    def barrier(self) -> None:
        """Return once every member has called it."""

    def close(self) -> None:
        """Release the group's resources."""


def exchange_bytes(group: Group, size: int, data: bytes) -> list[bytes]:
    """Allgather one bytes object per member over ``group`` (``size`` members) with two
    ``allgatherv`` calls, the lengths first: what a backend whose library has no object
    allgather can return from :meth:`Backend.exchange`."""
    data = bytes(data)
    lengths = np.zeros(size, dtype=np.int64)
    mine = np.array([len(data)], dtype=np.int64)
    group.allgatherv(mine.view(np.uint8), lengths.view(np.uint8), [8] * size)
    recv = np.empty(int(lengths.sum()), dtype=np.uint8)
    group.allgatherv(np.frombuffer(data, dtype=np.uint8), recv, [int(n) for n in lengths])
    out, start = [], 0
    for n in lengths:
        out.append(recv[start:start + int(n)].tobytes())
        start += int(n)
    return out


class Backend(abc.ABC):
    """One per process.  Constructed by the engine as ``cls(config)`` during ``fuse.init``."""

    api_version: ClassVar[int] = 1
    name: ClassVar[str] = "unnamed"
    # True if a collective runs entirely on the thread that calls it, with no threads of the
    # backend's own involved (MPI's shared-memory and TCP channels poll from the caller; Gloo
    # hands I/O to its own loop thread).  Then a thread waiting for a lone collective may run
    # it itself instead of waking the engine thread (FUSE_SPIN_TIME_US); a thread spinning
    # beside a backend's own threads would take the core they need.
    collectives_in_caller_thread: ClassVar[bool] = False

    @classmethod
    def is_available(cls) -> tuple[bool, str]:
        """(usable here, reason if not).  Must be cheap and must not start communication."""
        return True, ""

    @abc.abstractmethod
    def __init__(self, config) -> None:
        """Connect to the job: ``config`` is a :class:`fuse.config.Config` (rank, size,
        rendezvous address, timeouts, interface)."""

    @abc.abstractmethod
    def exchange(self, data: bytes) -> list[bytes]:
        """Allgather a small bytes object over all ranks (used at start-up only)."""

    @abc.abstractmethod
    def create_group(self, ranks: Sequence[int], group_id: int) -> Group:
        """Build the group of the given global ranks (sorted).  Called by the members only,
        all with the same arguments; ``group_id`` is unique for the life of the job (0 is the
        world) and may be used to namespace rendezvous keys."""

    def close(self) -> None:
        """Tear down connections.  Called once, at shutdown."""

    def abort(self) -> None:
        """The job gives this backend's groups up (its engine failed: an elastic job re-forms):
        fail whatever collective still runs on them now instead of at a timeout (a peer that
        vanished with its host never closes its connections), so that :meth:`close` does not
        wait for it.  May be called from any thread, before ``close``.  The default does
        nothing: such a collective ends at the backend's own timeout."""

    def validate_group(self, ranks: Sequence[int], group_id: int, ids_in_use) -> list[int]:
        """The checks every ``create_group`` makes, written once: ``ranks`` sorted, or
        ValueError naming the backend when the id is taken, a rank is repeated or outside the
        world, or this rank is not a member."""
        ranks = sorted(int(r) for r in ranks)
        if group_id in ids_in_use:
            raise ValueError(f"{self.name}: group id {group_id} is already in use")
        if len(set(ranks)) != len(ranks) or not all(0 <= r < self.size for r in ranks):
            raise ValueError(f"{self.name}: invalid ranks {ranks} for a world of {self.size}")
        if self.rank not in ranks:
            raise ValueError(f"{self.name}: rank {self.rank} is not in group {group_id} {ranks}")
        return ranks


class ConnectingBackend(Backend):
    """A backend that connects each of its groups itself (fuse's Gloo, the pygloo plugin):
    it implements :meth:`connect` and keeps ``world`` (group 0, every rank) and ``groups``
    (every group it made, by id); ``exchange``, ``create_group`` and ``close`` are answered
    from them here, once for every such backend."""

    world: Group
    groups: dict[int, Group]

    @abc.abstractmethod
    def connect(self, ranks: list[int], group_id: int) -> Group:
        """Connect the group of ``ranks`` (sorted, this rank among them) as ``group_id`` and
        keep it in ``groups``."""

    def exchange(self, data: bytes) -> list[bytes]:
        return exchange_bytes(self.world, self.size, data)

    def create_group(self, ranks: Sequence[int], group_id: int) -> Group:
        if group_id == 0 and sorted(ranks) == list(range(self.size)):
            return self.world
        return self.connect(self.validate_group(ranks, group_id, self.groups), group_id)

    def close(self) -> None:
        for group in self.groups.values():
            group.close()
        self.groups.clear()


def dtype_name_to_numpy(dtype: str) -> np.dtype:
    """numpy dtype used to view a buffer of wire type ``dtype`` (bfloat16 travels as uint16)."""
    return np.dtype("uint16" if dtype == "bfloat16" else dtype)


# ---------------------------------------------------------------- device (GPU) backends

class DeviceGroup(abc.ABC):
    """The members of one process set on a device backend (NCCL): one communicator.

    Buffers are 1-D contiguous device arrays (CuPy arrays, or anything with ``.data.ptr``,
    ``.size`` and ``.dtype``); ``dtype`` is the wire type's name as in :class:`Group`.  Every
    call is *enqueued* on ``stream`` (a CuPy stream) and returns without waiting for the device:
    ordering with other streams is the caller's business (events), never a host wait.  Calls
    made between :meth:`group_start` and :meth:`group_end` are launched together (NCCL's group
    semantics), which is what lets point-to-point calls of an alltoall proceed.
    """

    rank: int
    size: int

    @abc.abstractmethod
    def allreduce(self, sendbuf, recvbuf, dtype: str, op: str, stream) -> None:
        """Reduce ``sendbuf`` into ``recvbuf`` (may be the same buffer) across the group."""

    @abc.abstractmethod
    def allgatherv(self, sendbuf, recvbuf, counts: Sequence[int], dtype: str, stream) -> None:
        """Every member's ``counts[i]`` elements into ``recvbuf``, member after member."""

    @abc.abstractmethod
    def broadcast(self, buf, root: int, dtype: str, stream) -> None:
        """Copy ``buf`` from group rank ``root`` to everyone, in place."""

    @abc.abstractmethod
    def alltoallv(self, sendbuf, sendcounts: Sequence[int], recvbuf,
                  recvcounts: Sequence[int], dtype: str, stream) -> None:
        """Send block i of ``sendbuf`` to member i; receive member i's block into ``recvbuf``."""

    @abc.abstractmethod
    def reducescatter(self, sendbuf, recvbuf, recvcounts: Sequence[int], dtype: str, op: str,
                      stream) -> None:
        """This member's block (``recvcounts[rank]`` elements) of the reduction in ``recvbuf``."""

    def group_start(self) -> None:
        """Open a group of calls launched together (nestable)."""

    def group_end(self) -> None:
        """Launch the calls made since the matching :meth:`group_start`."""

    def close(self) -> None:
        """Release the communicator."""


class DeviceBackend(abc.ABC):
    """A GPU backend, registered in ``fuse.backends`` beside the CPU ones and chosen with
    ``FUSE_GPU_BACKEND`` (default ``nccl``).  It never talks to the job by itself: whatever it
    must exchange to make a communicator (NCCL's unique id) goes through ``exchange``, which the
    device path (:mod:`fuse.job.device_path`) answers with fuse's CPU collectives on the
    process set.  One instance per process, made on the first device collective."""

    api_version: ClassVar[int] = 1
    name: ClassVar[str] = "unnamed"

    @classmethod
    def is_available(cls) -> tuple[bool, str]:
        """(usable here, reason if not): the library imports and a device is visible."""
        return True, ""

    @classmethod
    def built(cls) -> int:
        """The library's version as an int (NCCL's 22304 for 2.23.4), 0 when it cannot load."""
        return 0

    @abc.abstractmethod
    def create_group(self, rank: int, size: int, device: int, exchange) -> DeviceGroup:
        """The communicator of one process set on ``device`` for this member (``rank`` of
        ``size``).  ``exchange(payload_or_None) -> payload``: group rank 0's bytes on every
        member (rank 0 passes them, the others None); collective over the set."""

    @abc.abstractmethod
    def use_device(self, device: int):
        """A context manager making ``device`` current on this thread (device copies, scaling
        and allocations go to the current device)."""

    @abc.abstractmethod
    def stream(self, device: int):
        """The stream collectives run on for ``device`` (one per device, made once)."""

    @abc.abstractmethod
    def external_stream(self, ptr: int, device: int):
        """A framework's stream (its ``cudaStream_t`` as an int) as this backend's stream."""

    @abc.abstractmethod
    def new_event(self, device: int):
        """An event without timing (cheap to record and wait on)."""

    @abc.abstractmethod
    def from_dlpack(self, obj):
        """A device array over ``obj``'s own memory (a framework tensor exporting DLPack or
        ``__cuda_array_interface__``): no copy."""

    @abc.abstractmethod
    def empty(self, count: int, dtype: str, device: int):
        """A new 1-D device array of ``count`` elements of ``dtype``."""

    def close(self) -> None:
        """Tear down every group; called at shutdown."""
