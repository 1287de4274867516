"""The MPI backend, over mpi4py: ``FUSE_BACKEND=mpi``, or any script started by ``mpirun``.

What runs over MPI: the start-up exchange (``exchange``, an ``MPI_Allgather`` of pickles) and
every data-plane collective (``MPI_Allreduce``, ``MPI_Allgatherv``, ``MPI_Bcast``,
``MPI_Alltoallv``, ``MPI_Reduce_scatter``, ``MPI_Barrier``).  Negotiation stays on the engine's
own TCP control star (see ``fuse/worker/lifecycle.py``); small allreduces travel with it and never
reach MPI, and when every rank is on one host the engine reduces large ones through shared
memory itself (``fuse/engine/shm.py``, faster than MPI_Allreduce there).

Communicators.  The world is a duplicate (``MPI_Comm_dup``) of ``MPI_COMM_WORLD``, of the
communicator passed to ``fuse.init(comm=...)``, or of the group of the ranks listed there, so
fuse's messages never match the application's.  Each process set is a sub-communicator of the
world, made with ``MPI_Comm_create_group`` (collective over the members only).  All of them
return errors (``MPI_ERRORS_RETURN``); a failed call raises :class:`MpiError` with MPI's error
string, and the engine turns it into a :class:`fuse.exceptions.BackendError` on every rank.

Threads.  The engine calls MPI from its background thread while the application may use mpi4py
from its own, so MPI is initialised with ``MPI_THREAD_MULTIPLE``
(``FUSE_MPI_THREADS_DISABLE=1``, alias ``HOROVOD_MPI_THREADS_DISABLE``, asks for
``MPI_THREAD_SERIALIZED`` instead: enough for fuse alone, not for mixing in mpi4py calls).
If the application initialised MPI first, its level stands; ``fuse.mpi_threads_supported()``
says which one it got.  mpi4py releases the GIL inside every blocking MPI call.

Types.  bfloat16 (and float16 when the MPI library lacks ``MPI_FLOAT16_T``) are reduced by a
user-defined MPI operation that calls the engine's own reduction kernels; bool sums and maxima
are logical ORs, minima and products logical ANDs.

Running as root.  MPICH (the ``mpich`` wheel that ``pip install fuse-dl[mpi]`` brings) needs
nothing.  Open MPI refuses to start as root unless ``OMPI_ALLOW_RUN_AS_ROOT=1`` and
``OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1`` are set; ``fuserun --mpi`` sets both (and passes
``--allow-run-as-root``) when it runs as root, a hand-written ``mpirun`` command must set them.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any, Sequence

import numpy as np

from fuse.backends.base import Backend, Group
from fuse.backends.mpi.errors import MpiError
from fuse.config import MPI_LAUNCHER_VARS, launched_by_mpi  # noqa: F401  (public here too)

__all__ = ["MPIBackend", "MPIGroup", "MpiError", "launched_by_mpi"]



def _threads_disabled(environ=os.environ) -> bool:
    from fuse.config import parse_bool

    for var in ("FUSE_MPI_THREADS_DISABLE", "HOROVOD_MPI_THREADS_DISABLE"):
        if var in environ:
            return parse_bool(environ[var])
    return False


def _mpi():
    """mpi4py's MPI module, initialising MPI at the thread level fuse needs if nobody has."""
    import mpi4py

    if "mpi4py.MPI" not in __import__("sys").modules:
        mpi4py.rc.thread_level = "serialized" if _threads_disabled() else "multiple"
    from mpi4py import MPI

    if not MPI.Is_initialized():       # the application set mpi4py.rc.initialize = False
        if MPI.Is_finalized():
            raise MpiError("mpi: MPI has already been finalized in this process; fuse cannot "
                           "start after MPI.Finalize()")
        MPI.Init_thread(MPI.THREAD_SERIALIZED if _threads_disabled() else MPI.THREAD_MULTIPLE)
    return MPI


def _error(what: str, err: BaseException, rank: int | None = None) -> MpiError:
    """An MpiError for a failed MPI call, carrying MPI's own error string."""
    where = f" (rank {rank} of the group)" if rank is not None else ""
    code = getattr(err, "error_code", None)
    text = err.Get_error_string() if hasattr(err, "Get_error_string") else str(err)
    return MpiError(f"{what} failed{where}: {text.strip()}", code)


def _world_comm(MPI, comm):
    """The communicator fuse runs on, before duplication: COMM_WORLD, the given mpi4py
    communicator, or the group of COMM_WORLD made of the given ranks."""
    if comm is None:
        return MPI.COMM_WORLD
    if isinstance(comm, MPI.Comm):
        if comm == MPI.COMM_NULL:
            raise ValueError("init(comm=...): this process is not part of the communicator "
                             "(MPI.COMM_NULL); only its members may call fuse.init")
        if comm.Is_inter():
            raise ValueError("init(comm=...) needs an intracommunicator")
        return comm
    if isinstance(comm, (list, tuple, range)):
        world = MPI.COMM_WORLD
        ranks = sorted(int(r) for r in comm)
        if len(set(ranks)) != len(ranks) or not all(0 <= r < world.size for r in ranks):
            raise ValueError(f"init(comm={list(comm)}): ranks must be distinct and between 0 "
                             f"and {world.size - 1} (the size of MPI_COMM_WORLD)")
        if world.rank not in ranks:
            raise ValueError(f"init(comm={ranks}): MPI_COMM_WORLD rank {world.rank} is not in "
                             "the list; only the listed ranks may call fuse.init")
        if ranks == list(range(world.size)):
            return world
        group = world.Get_group().Incl(ranks)
        try:
            return world.Create_group(group)
        finally:
            group.Free()
    raise TypeError(f"init(comm=...) takes None, a list of ranks or an mpi4py communicator, "
                    f"not {type(comm).__name__}")


class MPIGroup(Group):
    """One process set: an MPI communicator and the collectives fuse runs on it."""

    def __init__(self, comm, owned: bool = True) -> None:
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self._owned = owned
        self._MPI = _mpi()

    def __repr__(self) -> str:
        return f"MPIGroup(rank={self.rank}, size={self.size})"

    def _call(self, what: str, fn, *args) -> None:
        try:
            fn(*args)
        except self._MPI.Exception as err:
            raise _error(f"mpi: {what}", err, self.rank) from None

    def allreduce(self, buf: np.ndarray, dtype: str, op: str) -> None:
        if self.size == 1 or buf.size == 0:
            return
        mtype, mop = _types.lookup(dtype, op)
        self._call("MPI_Allreduce", self.comm.Allreduce, self._MPI.IN_PLACE, [buf, mtype], mop)

    def reducescatter(self, buf: np.ndarray, recvcounts: Sequence[int], dtype: str,
                      op: str) -> None:
        if self.size == 1 or buf.size == 0:
            return
        mtype, mop = _types.lookup(dtype, op)
        self._call("MPI_Reduce_scatter", self.comm.Reduce_scatter, self._MPI.IN_PLACE,
                   [buf, mtype], [int(c) for c in recvcounts], mop)

    def allgatherv(self, sendbuf: np.ndarray, recvbuf: np.ndarray,
                   recvbytes: Sequence[int]) -> None:
        counts = [int(n) for n in recvbytes]
        displs = _displacements(counts)
        byte = self._MPI.BYTE
        self._call("MPI_Allgatherv", self.comm.Allgatherv, [sendbuf, len(sendbuf), byte],
                   [recvbuf, (counts, displs), byte])

    def broadcast(self, buf: np.ndarray, root: int) -> None:
        if self.size == 1 or buf.size == 0:
            return
        self._call("MPI_Bcast", self.comm.Bcast, [buf, self._MPI.BYTE], int(root))

    def alltoallv(self, sendbuf: np.ndarray, sendbytes: Sequence[int], recvbuf: np.ndarray,
                  recvbytes: Sequence[int]) -> None:
        scounts = [int(n) for n in sendbytes]
        rcounts = [int(n) for n in recvbytes]
        byte = self._MPI.BYTE
        self._call("MPI_Alltoallv", self.comm.Alltoallv,
                   [sendbuf, (scounts, _displacements(scounts)), byte],
                   [recvbuf, (rcounts, _displacements(rcounts)), byte])

    def barrier(self) -> None:
        self._call("MPI_Barrier", self.comm.Barrier)

    def close(self) -> None:
        comm, self.comm = self.comm, None
        if comm is None or not self._owned:
            return
        MPI = self._MPI
        if not MPI.Is_finalized() and comm != MPI.COMM_NULL:
            try:
                comm.Free()
            except MPI.Exception:
                pass


def _displacements(counts: list[int]) -> list[int]:
    out, total = [], 0
    for n in counts:
        out.append(total)
        total += n
    return out


class _TypeTable:
    """(MPI datatype, MPI op) for a wire dtype and a fuse op, built on first use."""

    _NATIVE = {"uint8": "UINT8_T", "int8": "INT8_T", "uint16": "UINT16_T", "int16": "INT16_T",
               "int32": "INT32_T", "int64": "INT64_T", "float32": "FLOAT", "float64": "DOUBLE",
               "float16": "FLOAT16_T", "bool": "C_BOOL"}
    _OPS = {"sum": "SUM", "min": "MIN", "max": "MAX", "product": "PROD"}
    _BOOL_OPS = {"sum": "LOR", "max": "LOR", "min": "LAND", "product": "LAND"}

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._user_ops: list[Any] = []

    def lookup(self, dtype: str, op: str) -> tuple[Any, Any]:
        try:
            return self._cache[(dtype, op)]
        except KeyError:
            pass
        MPI = _mpi()
        if op not in self._OPS:
            raise MpiError(f"mpi: unknown reduction {op!r}")
        name = self._NATIVE.get(dtype)
        mtype = getattr(MPI, name, MPI.DATATYPE_NULL) if name else MPI.DATATYPE_NULL
        if dtype == "bool":
            pair = (mtype, getattr(MPI, self._BOOL_OPS[op]))
        elif mtype != MPI.DATATYPE_NULL:
            pair = (mtype, getattr(MPI, self._OPS[op]))
        elif dtype in ("bfloat16", "float16"):
            pair = (MPI.UINT16_T, self._user_op(MPI, dtype, op))
        else:
            raise MpiError(f"mpi: no MPI datatype for {dtype!r}")
        self._cache[(dtype, op)] = pair
        return pair

    def _user_op(self, MPI, dtype: str, op: str):
        """An MPI operation on 2-byte words that reduces them as ``dtype`` with fuse's kernels."""
        from fuse.engine.arrays import reduce_arrays

        def reduce(inbuf, inoutbuf, datatype):
            reduce_arrays(inoutbuf, inbuf, dtype, op)

        mop = MPI.Op.Create(reduce, commute=True)
        self._user_ops.append(mop)
        return mop

    def free(self) -> None:
        MPI = _mpi()
        if not MPI.Is_finalized():
            for mop in self._user_ops:
                mop.Free()
        self._user_ops.clear()
        self._cache.clear()


_types = _TypeTable()


class MPIBackend(Backend):
    """The MPI backend.  ``MPIBackend(config, comm=None)`` duplicates the job's communicator.

    ``comm`` is what ``fuse.init(comm=...)`` received: None (``MPI_COMM_WORLD``), a list of
    ``MPI_COMM_WORLD`` ranks, or an mpi4py intracommunicator.  ``config.rank``/``size`` must
    agree with it (``fuse.init`` takes them from :meth:`job_identity`).
    """

    name = "mpi"
    collectives_in_caller_thread = True

    @classmethod
    def is_available(cls) -> tuple[bool, str]:
        if importlib.util.find_spec("mpi4py") is None:
            return False, "mpi4py is not installed (pip install 'fuse-dl[mpi]')"
        return True, ""

    @classmethod
    def version(cls) -> str:
        import mpi4py
        return f"mpi4py {mpi4py.__version__}"

    @classmethod
    def job_identity(cls, comm=None) -> dict[str, Any]:
        """rank, size, local_rank, local_size, cross_rank, cross_size and hostname of this
        process, read from the communicator fuse will run on (initialises MPI).  Local ranks
        share a node (``MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)``); cross ranks index the
        nodes that run the same local rank, as in Horovod."""
        MPI = _mpi()
        base = _world_comm(MPI, comm)
        try:
            local = base.Split_type(MPI.COMM_TYPE_SHARED, key=base.rank)
            cross = base.Split(local.rank, key=base.rank)
            ident = {"rank": base.rank, "size": base.size,
                     "local_rank": local.rank, "local_size": local.size,
                     "cross_rank": cross.rank, "cross_size": cross.size,
                     "hostname": MPI.Get_processor_name()}
            local.Free()
            cross.Free()
        except MPI.Exception as err:
            raise _error("mpi: finding this process's node (MPI_Comm_split_type)", err) from None
        if base is not MPI.COMM_WORLD and base is not comm:
            base.Free()
        return ident

    def __init__(self, config, comm=None) -> None:
        MPI = self._MPI = _mpi()
        base = _world_comm(MPI, comm)
        self.rank, self.size = config.rank, config.size
        if (base.Get_rank(), base.Get_size()) != (config.rank, config.size):
            raise MpiError(
                f"mpi: fuse was told it is rank {config.rank} of {config.size}, but MPI says "
                f"rank {base.Get_rank()} of {base.Get_size()}.  Start MPI jobs with mpirun "
                "(or `fuserun --mpi`), not with fuserun's own launcher, and do not set "
                "FUSE_RANK/FUSE_SIZE by hand")
        try:
            dup = base.Dup()
            dup.Set_errhandler(MPI.ERRORS_RETURN)
            dup.Set_name("fuse.world")
        except MPI.Exception as err:
            raise _error("mpi: MPI_Comm_dup of the world", err) from None
        finally:
            if base is not MPI.COMM_WORLD and base is not comm:
                base.Free()
        self.world = MPIGroup(dup)
        self._groups: dict[int, MPIGroup] = {0: self.world}

    @property
    def thread_level(self) -> int:
        return self._MPI.Query_thread()

    def threads_supported(self) -> bool:
        """True when MPI runs at MPI_THREAD_MULTIPLE (mpi4py may be used alongside fuse)."""
        return self._MPI.Query_thread() == self._MPI.THREAD_MULTIPLE

    def exchange(self, data: bytes) -> list[bytes]:
        try:
            return [bytes(x) for x in self.world.comm.allgather(bytes(data))]
        except self._MPI.Exception as err:
            raise _error("mpi: MPI_Allgather (start-up exchange)", err, self.rank) from None

    def create_group(self, ranks: Sequence[int], group_id: int) -> Group:
        if group_id == 0 and sorted(ranks) == list(range(self.size)):
            return self.world
        ranks = self.validate_group(ranks, group_id, self._groups)
        MPI = self._MPI
        world = self.world.comm
        group = world.Get_group().Incl(ranks)
        try:
            comm = world.Create_group(group, tag=group_id % 32768)
            comm.Set_errhandler(MPI.ERRORS_RETURN)
            comm.Set_name(f"fuse.set{group_id}")
        except MPI.Exception as err:
            raise _error(f"mpi: MPI_Comm_create_group for process set {group_id} {ranks}",
                         err, self.rank) from None
        finally:
            group.Free()
        sub = MPIGroup(comm)
        self._groups[group_id] = sub
        return sub

    def close(self) -> None:
        groups = list(self._groups.values())
        self._groups.clear()
        for group in groups:
            group.close()
        _types.free()


def __getattr__(name: str):
    if name == "MPIError":      # deprecated second spelling of MpiError
        from fuse.backends.mpi import errors

        return errors.__getattr__(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
