"""Process sets: collectives over a subset of the ranks (Horovod's ``ProcessSet``)."""

from __future__ import annotations

from typing import Iterable

from fuse.job import state


class ProcessSet:
    """A sorted set of global ranks.  Becomes usable once registered, either by passing it to
    ``init(process_sets=[...])`` or by ``add_process_set`` (with dynamic process sets on)."""

    def __init__(self, ranks_or_comm: Iterable[int] | object):
        self.process_set_id: int | None = None
        if hasattr(ranks_or_comm, "Get_group"):      # an mpi4py communicator
            self.mpi_comm = ranks_or_comm
            # Ranks are positions in fuse's world, which init(comm=...) may make a subset of
            # MPI_COMM_WORLD: translate once fuse is running (see ``ranks``).
            self._ranks: list[int] | None = None
        else:
            self.mpi_comm = None
            self._ranks = _checked(ranks_or_comm)

    @property
    def ranks(self) -> list[int]:
        if self._ranks is None:
            ranks = _checked(_translate(self.mpi_comm))
            if not state.is_initialized():
                return ranks      # provisional, against MPI_COMM_WORLD
            self._ranks = ranks
        return self._ranks

    @ranks.setter
    def ranks(self, value) -> None:
        self._ranks = _checked(value)

    def _id(self) -> int:
        if self.process_set_id is None:
            raise ValueError(f"{self} is not registered: pass it to init(process_sets=...) or "
                             "add_process_set()")
        return self.process_set_id

    def size(self) -> int:
        return len(self.ranks)

    def rank(self) -> int:
        """This process's position in the set; raises if it is not a member."""
        me = state.rank()
        if me not in self.ranks:
            raise ValueError(f"rank {me} is not in {self}")
        return self.ranks.index(me)

    def included(self) -> bool:
        return state.rank() in self.ranks

    def __str__(self) -> str:
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"

    __repr__ = __str__

    def __eq__(self, other) -> bool:
        return isinstance(other, ProcessSet) and other.ranks == self.ranks

    def __hash__(self) -> int:
        return hash(tuple(self.ranks))


def _checked(ranks) -> list[int]:
    out = sorted(int(r) for r in ranks)
    if len(set(out)) != len(out):
        raise ValueError(f"process set ranks must be distinct: {out}")
    return out


def _translate(comm) -> list[int]:
    """The fuse ranks of a communicator's members: positions in fuse's world communicator
    (the MPI backend's), or in MPI_COMM_WORLD before fuse runs on MPI."""
    from mpi4py import MPI  # only reachable when the user passed a communicator
    world = getattr(getattr(state.backend(), "world", None), "comm", None) or MPI.COMM_WORLD
    group = comm.Get_group()
    ranks = MPI.Group.Translate_ranks(group, list(range(group.Get_size())), world.Get_group())
    if any(r == MPI.UNDEFINED for r in ranks):
        raise ValueError("the communicator has members outside fuse's world communicator")
    return list(ranks)


class _GlobalProcessSet(ProcessSet):
    """All ranks; id 0; its ranks are known once fuse is initialized."""

    def __init__(self):
        self.mpi_comm = None
        self.process_set_id = 0

    @property
    def ranks(self):  # type: ignore[override]
        return list(range(state.size()))

    @ranks.setter
    def ranks(self, value):
        pass

    def _id(self) -> int:
        return 0

    def __str__(self) -> str:
        # rendered in signatures (help(), inspect) before init(), when size() would raise
        if not state.is_initialized():
            return "ProcessSet(process_set_id=0, ranks=<every rank, known at init()>)"
        return super().__str__()

    __repr__ = __str__

    def __eq__(self, other) -> bool:
        return isinstance(other, ProcessSet) and other.process_set_id == 0

    def __hash__(self) -> int:
        return 0


global_process_set = _GlobalProcessSet()


def process_set_id(process_set: ProcessSet | None) -> int:
    """The id of a registered process set (None: the global set)."""
    ps = global_process_set if process_set is None else process_set
    pid = ps._id()
    if pid != 0 and state.registered_process_set(pid) is None:
        raise ValueError(f"{ps} has been removed or was never registered")
    return pid


def process_set_by_id(pid: int) -> ProcessSet:
    """The registered process set whose id is ``pid`` (for APIs that take an id, like
    TensorFlow's ``size_op(process_set_id)``)."""
    if int(pid) == 0:
        return global_process_set
    found = state.registered_process_set(int(pid))
    if found is None:
        raise ValueError(f"no process set with id {pid} is registered")
    return found
